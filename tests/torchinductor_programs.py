"""Running the small programs transcribed from PyTorch's Inductor, functionalization
and dynamo tests (catalogues: ``inductor_mutation_programs``, ``inductor_op_programs``,
``functionalization_programs``; registry: ``program_registry``).

Origin: pytorch/pytorch ``test/inductor/test_torchinductor.py`` (``CommonTemplate``:
each ``self.common(fn, args)``; the name is the test's without ``test_``, a
suffix numbers a test's further programs) and ``test/test_functionalization.py``
(names prefixed ``functionalization_``). Rewritten here compactly, with smaller
inputs, favouring mutation, views, in-place ops, indexing and scatter; programs
named ``regression_*`` are not PyTorch's but reductions of bugs these programs found.

Each program is run by :func:`run` through one entry point (``conveyor.compile``
or ``torch.compile(backend="conveyor")``) and one backend (``eager`` or
``inductor``), without grad and (where an input is floating point) with grad:
every floating-point input is then a non-leaf requiring grad (``leaf * 1``, taken
to the original's size, strides and offset, so in-place ops on it are legal as
in eager), and ``conveyor.testing.check`` compares outputs, aliasing, inputs after
the call and the gradients of the leaves with eager's.

The sweep over the whole upstream files (880 programs extracted by running the
test methods with a recording ``self.common``) is summed up in issue 24's notes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import conveyor
import functionalization_programs  # noqa: F401  (registers its programs)
import inductor_mutation_programs  # noqa: F401
import inductor_op_programs  # noqa: F401
import torch
from conveyor.testing import check
from program_registry import PROGRAMS

# -- running one program ----------------------------------------------------------------


def with_grad(values: list[Any]) -> list[Any] | None:
    """Floating-point tensors as non-leaves requiring grad, with the original's
    size, strides and offset and storage sharing; None if there are none."""
    roots: dict[int, torch.Tensor] = {}
    out: list[Any] = []
    for v in values:
        if not (isinstance(v, torch.Tensor) and v.is_floating_point() and v.layout is torch.strided):
            out.append(v)
            continue
        key = v.untyped_storage()._cdata
        if key not in roots:
            n = v.untyped_storage().nbytes() // v.element_size()
            flat = torch.empty(0, dtype=v.dtype).set_(v.untyped_storage(), 0, (n,), (1,)).clone()
            roots[key] = flat.requires_grad_(True).mul(1)
        root = roots[key]
        if v.is_contiguous() and v.storage_offset() == 0 and v.numel() == root.numel():
            out.append(root.view(v.shape))
        else:
            out.append(root.as_strided(v.size(), v.stride(), v.storage_offset()))
    return out if len(roots) else None


def compiler(entry: str, backend: str, **options: Any) -> Callable[[Callable[..., Any]], Any]:
    """``conveyor.compile`` (``entry="conveyor"``) or ``torch.compile(backend="conveyor")``
    (``"dynamo"``, after ``torch._dynamo.reset()``: past dynamo's recompile limit
    the rest of a sweep would run eagerly without a word); ``options`` are
    configuration keys for either (``stages={...}``)."""
    if entry == "conveyor":
        return lambda f: conveyor.compile(f, backend=backend, **options)

    def dynamo(f: Callable[..., Any]) -> Any:
        torch._dynamo.reset()
        if backend == "eager" and not options:
            return torch.compile(f, backend="conveyor")
        return torch.compile(f, backend="conveyor", options={"backend": backend, **options})

    return dynamo


#: (atol, rtol) by backend: Inductor reassociates floating-point work
TOLERANCE = {"eager": (1e-5, 1.3e-5), "inductor": (1e-4, 1e-4)}


def run(name: str, entry: str, backend: str, grad: bool) -> None:
    """Check program ``name`` against eager (``AssertionError`` on a difference)."""
    fn, make = PROGRAMS[name]
    torch.manual_seed(0)
    values = make()
    if grad:
        made = with_grad(values)
        assert made is not None, f"{name} has no floating-point input"
        values = made
    atol, rtol = TOLERANCE[backend]
    check(fn, *values, compile=compiler(entry, backend), atol=atol, rtol=rtol)


def has_float_input(name: str) -> bool:
    torch.manual_seed(0)
    return with_grad(PROGRAMS[name][1]()) is not None
