"""The programs of PyTorch's ``test/inductor/test_cpu_repro.py`` (``CPUReproTests``,
pytorch/pytorch at 000b3bd8434fa6ef1e081def6931e5eda4020118): real programs that
once broke Inductor on CPU (odd dtypes, strides, in-place ops, views, reductions,
indexing, conv / linear / LSTM modules, randomness, scalar inputs). Rewritten here
with smaller inputs; the catalogues are ``cpu_repro_catalogue.py`` to
``cpu_repro_catalogue4.py``. Left out: tests that only inspect generated C++ code,
vectorization counters or ISA selection, and those that need mkldnn packing,
quantization or CUDA.

Each program runs through the harness of the transcribed Inductor programs
(``torchinductor_programs``: its ``compiler``, ``with_grad`` and tolerances,
``conveyor.testing.check``): both entry points, the ``eager`` and
``inductor`` backends, under ``torch.no_grad()`` as upstream runs most of them
("nograd") and, where an input is floating point or a module has parameters,
with grad (floating-point inputs become non-leaves requiring grad).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
import torchinductor_programs as tp

Make = Callable[[], list[Any]]


@dataclasses.dataclass(frozen=True)
class Program:
    """One program: ``build()`` gives the callable (a module is built afresh, under
    a fixed seed), ``make()`` its inputs."""

    build: Callable[[], Callable[..., Any]]
    make: Make
    #: draws random numbers: the inductor backend runs with ``fallback_random``
    random: bool = False
    #: (atol, rtol) for the inductor backend where Inductor's rounding differs
    #: (fp32 compute of half-precision values)
    tol: tuple[float, float] | None = None
    #: checked only without grad (upstream runs it so; the reason is in the catalogue)
    grad: bool = True


PROGRAMS: dict[str, Program] = {}


def lam(name: str, make: Make, fn: Callable[..., Any], **flags: Any) -> None:
    assert name not in PROGRAMS, name
    PROGRAMS[name] = Program(lambda: fn, make, **flags)


def module(name: str, make: Make, **flags: Any) -> Callable[[Callable[[], torch.nn.Module]], Any]:
    def register(factory: Callable[[], torch.nn.Module]) -> Callable[[], torch.nn.Module]:
        assert name not in PROGRAMS, name
        PROGRAMS[name] = Program(factory, make, **flags)
        return factory

    return register


def randn(*shapes: tuple[int, ...], dtype: torch.dtype = torch.float32) -> Make:
    return lambda: [torch.randn(*s, dtype=dtype) for s in shapes]


def args(*values: Callable[[], Any]) -> Make:
    return lambda: [v() for v in values]


LOWP = (torch.float16, torch.bfloat16)
LOOSE = (2e-2, 2e-2)


def load() -> None:
    import cpu_repro_catalogue  # noqa: F401  (registers its programs)
    import cpu_repro_catalogue2  # noqa: F401
    import cpu_repro_catalogue3  # noqa: F401
    import cpu_repro_catalogue4  # noqa: F401


def _built(name: str) -> Callable[..., Any]:
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return PROGRAMS[name].build()


def _values(name: str) -> list[Any]:
    torch.manual_seed(0)
    return PROGRAMS[name].make()


def has_grad(name: str) -> bool:
    if not PROGRAMS[name].grad:
        return False
    fn = _built(name)
    if isinstance(fn, torch.nn.Module) and any(p.is_floating_point() for p in fn.parameters()):
        return True
    return tp.with_grad(_values(name)) is not None


def tolerance(name: str, backend: str, values: list[Any]) -> tuple[float, float]:
    program = PROGRAMS[name]
    if backend == "inductor" and program.tol is not None:
        return program.tol
    lowp = any(isinstance(v, torch.Tensor) and v.dtype in LOWP for v in values)
    return LOOSE if backend == "inductor" and lowp else tp.TOLERANCE[backend]


def run(name: str, entry: str, backend: str, grad: bool) -> None:
    """Check program ``name`` against eager (``AssertionError`` on a difference)."""
    program = PROGRAMS[name]
    fn = _built(name)
    values = _values(name)
    if grad:
        values = tp.with_grad(values) or values
    atol, rtol = tolerance(name, backend, values)
    options: dict[str, Any] = {}
    if backend == "inductor" and program.random:
        options = {"stages": {"inductor": {"config": {"fallback_random": True}}}}
    compile = tp.compiler(entry, backend, **options)
    if grad:
        tp.check(fn, *values, compile=compile, atol=atol, rtol=rtol)
    else:
        with torch.no_grad():
            tp.check(fn, *values, compile=compile, atol=atol, rtol=rtol)
