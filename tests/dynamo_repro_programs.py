"""Running the programs transcribed from PyTorch's dynamo tests (catalogues:
``dynamo_repros_catalogue`` (and ``2``, ``3``) from ``test/dynamo/test_repros.py``,
``dynamo_hop_catalogue`` from ``test/functorch/test_control_flow.py`` and
``test/dynamo/test_higher_order_ops.py``, ``dynamo_subclass_catalogue`` from
``test/dynamo/test_subclasses.py``).

Each program is registered with :func:`program`: a *build* function (called after
``torch.manual_seed(0)``) returning the function or ``nn.Module`` to compile, a
*make* function returning its inputs, and how many times it is called (``calls``:
a program whose state carries from call to call, a buffer, an attribute, a
recompilation, runs its compiled function that many times in a row, as eager
does). The names are the upstream tests' without ``test_`` (a suffix numbers
further programs of one test); rewritten compactly, with small inputs.

:func:`run` checks one program with ``conveyor.testing.check`` through one entry
(``conveyor.compile`` or ``torch.compile(backend="conveyor")``) and one backend
(``eager`` or ``inductor``), without grad or with grad: every floating-point input
then a non-leaf requiring grad (``leaf * 1``, so in-place ops on it are legal).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import conveyor
import torch
import torch.utils._pytree as pytree
from conveyor.testing import check
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

Make = Callable[[], list[Any]]


@dataclasses.dataclass(frozen=True)
class Program:
    """One transcribed program: what to compile, its inputs, how often to call it."""

    name: str
    build: Callable[[], Any]
    make: Make
    calls: int = 1
    #: inputs or outputs are tensor subclasses (``conveyor.testing.check`` clones
    #: inputs through their storage, which a wrapper subclass has none of): run by
    #: :func:`check_subclass`
    subclass: bool = False


PROGRAMS: dict[str, Program] = {}


def program(
    name: str, make: Make, calls: int = 1, subclass: bool = False
) -> Callable[[Callable[[], Any]], Callable[[], Any]]:
    """Register ``build`` (returning the function or module to compile) under ``name``."""

    def register(build: Callable[[], Any]) -> Callable[[], Any]:
        assert name not in PROGRAMS, name
        PROGRAMS[name] = Program(name, build, make, calls, subclass)
        return build

    return register


def fn(
    name: str, make: Make, calls: int = 1, subclass: bool = False
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a plain function ``f`` (built as itself) under ``name``."""

    def register(f: Callable[..., Any]) -> Callable[..., Any]:
        program(name, make, calls, subclass)(lambda: f)
        return f

    return register


def randn(*shapes: tuple[int, ...]) -> Make:
    return lambda: [torch.randn(*s) for s in shapes]


def args(*values: Callable[[], Any]) -> Make:
    return lambda: [v() for v in values]


class Repeat(torch.nn.Module):
    """``inner`` called ``n`` times on the same inputs, every result returned:
    the eager side of a program with ``calls > 1`` (its compiled side compiles
    ``inner`` once and calls that ``n`` times)."""

    def __init__(self, inner: Any, n: int) -> None:
        super().__init__()
        self.inner = inner
        self.n = n

    def forward(self, *a: Any) -> tuple[Any, ...]:
        return tuple(self.inner(*a) for _ in range(self.n))


def compiler(entry: str, backend: str) -> Callable[[Any], Any]:
    """``conveyor.compile`` (``"conveyor"``) or ``torch.compile(backend="conveyor")``
    (``"dynamo"``) with ``backend``; a :class:`Repeat` compiles its inner function once."""

    def one(f: Any) -> Any:
        if entry == "conveyor":
            return conveyor.compile(f, backend=backend)
        torch._dynamo.reset()
        if backend == "eager":
            return torch.compile(f, backend="conveyor")
        return torch.compile(f, backend="conveyor", options={"backend": backend})

    def compile_(f: Any) -> Any:
        if isinstance(f, Repeat):
            inner, n = one(f.inner), f.n
            return lambda *a: tuple(inner(*a) for _ in range(n))
        return one(f)

    return compile_


def with_grad(values: list[Any]) -> list[Any] | None:
    """Floating-point tensors (also inside lists and tuples) as non-leaves requiring
    grad (``leaf * 1``); one tensor passed twice stays one tensor. None if there
    is no floating-point tensor."""
    seen: dict[int, torch.Tensor] = {}

    def convert(v: Any) -> Any:
        if isinstance(v, torch.Tensor) and v.is_floating_point() and v.layout is torch.strided:
            if id(v) not in seen and is_traceable_wrapper_subclass(v):  # no storage to share
                seen[id(v)] = v.detach().clone().requires_grad_(True) * 1
            if id(v) not in seen:
                seen[id(v)] = v.detach().clone().requires_grad_(True) * 1
            return seen[id(v)]
        if type(v) in (list, tuple):
            return type(v)(convert(x) for x in v)
        return v

    out = [convert(v) for v in values]
    return out if seen else None


#: (atol, rtol) by backend: Inductor reassociates floating-point work
TOLERANCE = {"eager": (1e-5, 1.3e-5), "inductor": (1e-4, 1e-4)}


def run(
    name: str, entry: str, backend: str = "eager", grad: bool = False, programs: dict[str, Program] | None = None
) -> None:
    """Check program ``name`` (of ``programs``, default :data:`PROGRAMS`) against
    eager (``AssertionError`` on a difference)."""
    p = (PROGRAMS if programs is None else programs)[name]
    torch.manual_seed(0)
    target = p.build()
    values = p.make()
    if grad:
        made = with_grad(values)
        assert made is not None, f"{name} has no floating-point input"
        values = made
    if p.calls > 1:
        target = Repeat(target, p.calls)
    atol, rtol = TOLERANCE[backend]
    try:
        if p.subclass:
            check_subclass(p, grad, compiler(entry, backend), atol, rtol)
            return
        check(target, *values, compile=compiler(entry, backend), atol=atol, rtol=rtol)
    finally:
        torch._dynamo.reset()


def _parts(v: Any) -> list[Any]:
    """A tensor subclass as its type and inner tensors (recursively), else ``v``."""
    if isinstance(v, torch.Tensor) and is_traceable_wrapper_subclass(v):
        names, _ = v.__tensor_flatten__()
        return [type(v).__name__, *[x for n in names for x in _parts(getattr(v, n))]]
    if isinstance(v, torch.Tensor) and type(v) not in (torch.Tensor, torch.nn.Parameter):
        return [type(v).__name__, v.as_subclass(torch.Tensor)]
    return [v]


def _same(where: str, e: Any, c: Any, atol: float, rtol: float) -> None:
    le, se = pytree.tree_flatten(e)
    lc, sc = pytree.tree_flatten(c)
    assert sc == se, f"{where}: structure {sc} != eager {se}"
    for i, (x, y) in enumerate(zip(le, lc, strict=True)):
        px, py = _parts(x), _parts(y)
        assert len(px) == len(py), f"{where}[{i}]: {py[0]!r} != eager {px[0]!r}"
        for j, (a, b) in enumerate(zip(px, py, strict=True)):
            if isinstance(a, torch.Tensor):
                assert isinstance(b, torch.Tensor), f"{where}[{i}].{j}: {type(b).__name__}, eager a tensor"
                assert (b.dtype, b.shape) == (a.dtype, a.shape), f"{where}[{i}].{j}: {b.dtype} {b.shape} != {a.dtype} {a.shape}"
                torch.testing.assert_close(b.detach(), a.detach(), atol=atol, rtol=rtol, equal_nan=True)
            else:
                assert a == b, f"{where}[{i}].{j}: {b!r} != eager {a!r}"
        if isinstance(x, torch.Tensor):
            assert y.requires_grad == x.requires_grad, f"{where}[{i}]: requires_grad {y.requires_grad} != {x.requires_grad}"


def check_subclass(p: Program, grad: bool, compile_: Callable[[Any], Any], atol: float, rtol: float) -> None:
    """``check`` for programs on tensor subclasses: each side gets its own inputs
    (made again from the seed), and outputs, inputs after the call and the
    gradients of the leaves (after a backward of the outputs' sum) are compared,
    subclasses by their type and inner tensors."""
    sides = []
    for side in ("eager", "compiled"):
        torch.manual_seed(0)
        target = p.build()
        values = p.make()
        leaves = [v for v in values if isinstance(v, torch.Tensor) and v.is_floating_point()]
        if grad:
            leaves = [v.detach().clone().requires_grad_(True) for v in leaves]
            it = iter(leaves)
            values = [next(it) * 1 if isinstance(v, torch.Tensor) and v.is_floating_point() else v for v in values]
        if isinstance(target, torch.nn.Module):
            leaves += list(target.parameters())
        if p.calls > 1:
            target = Repeat(target, p.calls)
        run_ = target if side == "eager" else compile_(target)
        torch.manual_seed(1)
        out = run_(*values)
        outs = [o for o in pytree.tree_leaves(out) if isinstance(o, torch.Tensor) and o.requires_grad]
        if outs:
            sum(o.sum() for o in outs).backward()
        sides.append((out, values, [v.grad for v in leaves if v.requires_grad]))
    (eo, ev, eg), (co, cv, cg) = sides
    _same("output", eo, co, atol, rtol)
    _same("inputs after the call", ev, cv, atol, rtol)
    _same("gradients", eg, cg, atol, rtol)


def has_float_input(name: str, programs: dict[str, Program] | None = None) -> bool:
    torch.manual_seed(0)
    return with_grad((PROGRAMS if programs is None else programs)[name].make()) is not None


def load() -> dict[str, Program]:
    """Every catalogue's programs (importing a catalogue registers them)."""
    import dynamo_hop_catalogue  # noqa: F401
    import dynamo_repros_catalogue  # noqa: F401
    import dynamo_repros_catalogue2  # noqa: F401
    import dynamo_repros_catalogue3  # noqa: F401
    import dynamo_subclass_catalogue  # noqa: F401

    return PROGRAMS
