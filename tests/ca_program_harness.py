"""Running the hook and compiled-autograd programs (catalogues:
``compiled_autograd_programs``, ``autograd_hook_programs``) eagerly and with
conveyor, and comparing everything a user can see.

A program is a function of a :class:`Tools` object. It builds its tensors and
modules itself (after ``torch.manual_seed``), compiles the forward pieces it
chooses with ``t.compile`` (the identity in the reference run), registers hooks
that call ``t.log(kind, *values)``, runs its backwards, and returns what it
wants compared (tensors, gradients, numbers, flags; any pytree). The run is
repeated under one mode, a pair (forward, backward):

* forward ``eager`` (``t.compile`` is the identity), ``conveyor``
  (``conveyor.compile``) or ``dynamo`` (``torch.compile(backend="conveyor")``);
* backward ``engine`` (PyTorch's engine, node by node) or ``ca`` (the whole
  program inside ``conveyor_compiled_autograd.enable()``).

:func:`outcome` compares the mode's run with the reference run (forward eager,
backward engine): the returned values (structure, dtype, shape, values), and the
log: which hooks fired, in which order, and the tensors and numbers each saw.
A program that raises in eager must raise the same exception type.
"""

from __future__ import annotations

import contextlib
import dataclasses
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import torch
import torch.utils._pytree as pytree

FORWARDS = ("eager", "conveyor", "dynamo")
BACKWARDS = ("engine", "ca")
#: (atol, rtol) by backend: Inductor reassociates floating-point work
TOLERANCE = {"eager": (1e-5, 1.3e-5), "inductor": (1e-4, 1e-4)}


@dataclasses.dataclass(frozen=True)
class Program:
    """One program: its body, where it comes from, and what to expect."""

    name: str
    body: Callable[[Tools], Any]
    origin: str


PROGRAMS: dict[str, Program] = {}


def program(origin: str) -> Callable[[Callable[[Tools], Any]], Callable[[Tools], Any]]:
    """Register ``body`` under its name (without a leading ``p_``)."""

    def register(body: Callable[[Tools], Any]) -> Callable[[Tools], Any]:
        name = body.__name__.removeprefix("p_")
        assert name not in PROGRAMS, name
        PROGRAMS[name] = Program(name, body, origin)
        return body

    return register


def _snap(v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        return v.detach().clone()
    if isinstance(v, (tuple, list)):
        return tuple(_snap(x) for x in v)
    return v


class Tools:
    """What a program is given: ``compile``, ``log`` and the mode's names."""

    def __init__(self, compile_fn: Callable[[Any], Any], forward: str, backward: str) -> None:
        self._compile = compile_fn
        self.forward = forward
        self.backward = backward
        self.events: list[tuple[str, tuple[Any, ...]]] = []

    def compile(self, fn: Any) -> Any:
        """``fn`` compiled as the mode says (the identity in eager)."""
        return self._compile(fn)

    def log(self, kind: str, *values: Any) -> None:
        """Record a hook call: its kind and the values it saw (tensors are copied)."""
        self.events.append((kind, tuple(_snap(v) for v in values)))


def compiler(forward: str, backend: str) -> Callable[[Any], Any]:
    if forward == "eager":
        return lambda f: f
    if forward == "conveyor":
        import conveyor

        return lambda f: conveyor.compile(f, backend=backend)
    if forward == "aot_eager":  # torch's own, to tell conveyor's differences from torch's
        return lambda f: torch.compile(f, backend="aot_eager")
    return lambda f: torch.compile(f, backend="conveyor", options={"backend": backend})


@contextlib.contextmanager
def _backward_mode(backward: str, backend: str) -> Iterator[None]:
    if backward == "engine":
        yield
        return
    if backward == "torch_ca":  # torch's own compiled autograd (aot_eager), for comparison
        from torch._dynamo import compiled_autograd

        with compiled_autograd._enable(lambda gm: torch.compile(gm, backend="aot_eager")):
            yield
        return
    import conveyor_compiled_autograd as cca

    with cca.enable(backend=backend):
        yield


@dataclasses.dataclass
class Run:
    """One run of a program: its result or exception, its log, its warnings."""

    result: Any = None
    error: BaseException | None = None
    events: list[tuple[str, tuple[Any, ...]]] = dataclasses.field(default_factory=list)
    warnings: list[str] = dataclasses.field(default_factory=list)


def run(name: str, forward: str = "eager", backward: str = "engine", backend: str = "eager") -> Run:
    """Run program ``name`` once in the given mode."""
    torch._dynamo.reset()
    tools = Tools(compiler(forward, backend), forward, backward)
    out = Run()
    torch.manual_seed(123)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            with _backward_mode(backward, backend):
                out.result = _snap_tree(PROGRAMS[name].body(tools))
        except Exception as e:  # compared with eager's by the caller
            out.error = e
    out.events = tools.events
    out.warnings = [f"{w.category.__name__}: {w.message}" for w in caught if _is_ours(w)]
    torch._dynamo.reset()
    return out


def _is_ours(w: warnings.WarningMessage) -> bool:
    text = str(w.message)
    return "conveyor" in text or "eagerly" in text or "compiled_autograd" in w.filename


def _snap_tree(tree: Any) -> Any:
    return pytree.tree_map(lambda v: v.detach().clone() if isinstance(v, torch.Tensor) else v, tree)


def compare(expected: Run, actual: Run, backend: str = "eager") -> None:
    """``AssertionError`` naming the first difference between two runs."""
    if expected.error is not None:
        assert actual.error is not None, f"eager raised {expected.error!r}; conveyor did not"
        assert isinstance(actual.error, type(expected.error)), (
            f"eager raised {expected.error!r}; conveyor raised {actual.error!r}"
        )
    elif actual.error is not None:
        raise AssertionError(f"conveyor raised {type(actual.error).__name__}: {actual.error}") from actual.error
    else:
        _same("result", expected.result, actual.result, backend)
    kinds_e = [k for k, _ in expected.events]
    kinds_a = [k for k, _ in actual.events]
    assert kinds_a == kinds_e, f"hooks fired {kinds_a}, eager {kinds_e}"
    for i, ((kind, ve), (_, va)) in enumerate(zip(expected.events, actual.events, strict=True)):
        _same(f"hook call {i} ({kind})", ve, va, backend)


def _same(where: str, e: Any, a: Any, backend: str) -> None:
    atol, rtol = TOLERANCE[backend]
    le, se = pytree.tree_flatten(e)
    la, sa = pytree.tree_flatten(a)
    assert sa == se, f"{where}: structure {sa} != eager {se}"
    for i, (x, y) in enumerate(zip(le, la, strict=True)):
        if isinstance(x, torch.Tensor):
            assert isinstance(y, torch.Tensor), f"{where}[{i}]: {type(y).__name__}, eager a tensor"
            assert (y.dtype, y.shape, y.layout) == (x.dtype, x.shape, x.layout), (
                f"{where}[{i}]: {y.dtype} {tuple(y.shape)} {y.layout} != eager {x.dtype} {tuple(x.shape)} {x.layout}"
            )
            torch.testing.assert_close(y.to_dense(), x.to_dense(), atol=atol, rtol=rtol, equal_nan=True,
                                       msg=lambda m, where=where, i=i: f"{where}[{i}]: {m}")
        elif isinstance(x, float):
            assert abs(x - y) <= atol + rtol * abs(x), f"{where}[{i}]: {y} != eager {x}"
        else:
            assert x == y, f"{where}[{i}]: {y!r} != eager {x!r}"


def outcome(name: str, forward: str, backward: str, backend: str = "eager") -> tuple[Run, Run]:
    """The reference run and the mode's run of ``name``; :func:`compare` them."""
    return run(name), run(name, forward, backward, backend)
