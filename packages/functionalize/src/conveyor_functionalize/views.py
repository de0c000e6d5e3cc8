"""Regenerating an output that views another tensor at run time.

Note [View replay]: functionalization records, on each functional view, the
sequence of view ops that made it from its base (``ViewMeta``s). Replaying
that sequence on the caller's real tensor (``apply_view_meta_sequence``, the
same replay torch's ``gen_alias_from_base`` uses) gives a view built by the
same ops as eager's, with the same autograd node (``SliceBackward``, not
``AsStridedBackward``). A replay is used only when it was checked at compile
time to land on the output's exact sizes, strides and offset when applied to
the fake of what it views; otherwise, and for inputs whose own metadata the
program changed (the sequence starts from their metadata on entry), the view
is rebuilt with ``as_strided``. Under symbolic shapes (dynamo's dynamic
dims) a replay whose view ops take no symbolic argument (``view(-1)``,
``t()``, ``x[0]``, ``unbind``...) rebuilds a view; otherwise
(``x.view(x.shape[0], 2, 32)``, ``x.narrow(0, 1, n - 1)``) the view's
sizes, strides and offset are written as Python expressions of the sizes,
strides and offset of the tensor it views (:class:`SymbolicGeometry`),
evaluated on the real tensor at each call, and the view is rebuilt with
``as_strided``. Only a geometry that needs a symbol the viewed tensor does
not carry (a size taken from another input) is refused.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypeGuard, cast

import sympy
import torch
import torch.fx
from conveyor.stage_api import GRAD_META, StageError, SymbolicSizesUnsupported
from torch._C import _functionalization
from torch.fx.experimental.symbolic_shapes import statically_known_true
from torch.utils._sympy.functions import FloorDiv
from torch.utils._sympy.printers import PythonPrinter

STAGE = "functionalize"

Geometry = tuple[tuple[int, ...], tuple[int, ...], int]  # sizes, strides, storage offset
SymGeometry = tuple[
    tuple[int | torch.SymInt, ...], tuple[int | torch.SymInt, ...], int | torch.SymInt
]  # maybe symbolic


def concrete(t: torch.Tensor, what: str) -> Geometry:
    """Static sizes, strides and offset of ``t``; an error naming ``what``
    when any is symbolic."""
    sizes, strides, offset = tuple(t.size()), tuple(t.stride()), t.storage_offset()
    if not all(type(v) is int for v in (*sizes, *strides, offset)):
        raise SymbolicSizesUnsupported(STAGE, f"{what} has symbolic sizes or strides; only static shapes are supported")
    return sizes, strides, cast(int, offset)


def _plain(t: torch.Tensor) -> torch.Tensor:
    return torch._from_functional_tensor(cast(Any, t).elem) if torch._is_functional_tensor(getattr(t, "elem", t)) else t


@dataclass(frozen=True)
class SymbolicGeometry:
    """A view's sizes, strides and offset (relative to the viewed tensor's)
    under symbolic shapes, as a Python expression of the viewed tensor ``v``'s
    own sizes, strides and offset (Note [View replay]), evaluated per call.

    :ivar source: the expression, e.g. ``((v.size(0), 2, 32), (64, 32, 1), 0)``.
    """

    source: str

    @staticmethod
    def of(geometry: SymGeometry, viewed: torch.Tensor) -> SymbolicGeometry | None:
        """The expression of ``geometry`` in terms of ``viewed``'s own symbols;
        ``None`` when it needs a symbol ``viewed`` does not carry."""
        names: dict[sympy.Symbol, sympy.Expr] = {}
        values: list[tuple[Any, str]] = [(viewed.size(d), f"v.size({d})") for d in range(viewed.dim())]
        if viewed.layout is torch.strided:
            values += [(viewed.stride(d), f"v.stride({d})") for d in range(viewed.dim())]
            values.append((viewed.storage_offset(), "v.storage_offset()"))
        for value, name in values:
            if isinstance(value, torch.SymInt):
                solved = _solved(value.node.expr, sympy.Symbol(name, integer=True))
                if solved is not None:
                    names.setdefault(*solved)
        printer = PythonPrinter()

        def text(v: int | torch.SymInt) -> str | None:
            if type(v) is int:
                return str(v)
            expr = cast(torch.SymInt, v).node.expr
            if not expr.free_symbols <= names.keys():
                return None
            return f"({printer.doprint(expr.xreplace(names))})"

        sizes, strides, offset = geometry
        texts = [text(v) for v in (*sizes, *strides, offset)]
        if any(t is None for t in texts):
            return None
        n = len(sizes)

        def tup(items: Sequence[str | None]) -> str:
            return "(" + "".join(f"{t}, " for t in items) + ")"

        found = SymbolicGeometry(f"({tup(texts[:n])}, {tup(texts[n : 2 * n])}, {texts[-1]} - v.storage_offset())")
        try:  # once on the fake: an expression the printer wrote with a name it does not bind fails here
            found(viewed)
        except Exception:  # refused at compile time rather than at a call
            return None
        return found

    def __call__(self, viewed: torch.Tensor) -> Geometry:
        """Sizes, strides and relative offset for the real ``viewed``."""
        return cast(Geometry, eval(_compiled(self.source), _NAMES, {"v": viewed}))


def _solved(expr: sympy.Expr, name: sympy.Symbol) -> tuple[sympy.Symbol, sympy.Expr] | None:
    """A symbol of the viewed tensor's geometry and its value in terms of the
    ``name`` that geometry entry is read by: ``s`` itself, or ``(name - b) //
    a`` where the entry is ``a*s + b`` (a batch flattened into a dim:
    ``x.reshape(2, s, 32)`` of an input of ``2*s`` rows)."""
    if isinstance(expr, sympy.Symbol):
        return expr, name
    if len(expr.free_symbols) != 1:
        return None
    (symbol,) = expr.free_symbols
    poly = sympy.Poly(expr, symbol) if expr.is_polynomial(symbol) else None
    if poly is None or poly.degree() != 1:
        return None
    a, b = poly.all_coeffs()
    if not (a.is_Integer and b.is_Integer and a > 0):
        return None
    return symbol, FloorDiv(name - b, a)


#: what the printer may write besides arithmetic (``Max``, ``Min``, ceil and floor)
_NAMES: dict[str, Any] = {"__builtins__": {}, "max": max, "min": min, "int": int, "abs": abs, "math": math}


@functools.cache
def _compiled(source: str) -> Any:
    return compile(source, "<conveyor view geometry>", "eval")


@dataclass(frozen=True)
class ViewRecipe:
    """How to rebuild one view from the real tensor it views.

    :ivar geometry: sizes, strides, and storage offset *relative to the viewed
        tensor's own offset* (for ``as_strided``); ``None`` under symbolic
        shapes, where only a replay can rebuild the view.
    :ivar replay: the checked ``ViewMeta`` sequence, or ``None`` to use
        ``as_strided`` (Note [View replay]).
    :ivar detach: eager's view does not require grad though what it views may.
    :ivar no_grad: eager took the view under ``no_grad`` (Note [Views taken
        under no_grad]): rebuild it so too.
    :ivar symbolic: under symbolic shapes, the geometry as an expression of
        the viewed tensor's symbols, when no replay can rebuild the view.
    """

    geometry: Geometry | None
    replay: tuple[Any, ...] | None
    detach: bool
    no_grad: bool = False
    symbolic: SymbolicGeometry | None = None

    def __post_init__(self) -> None:
        if self.geometry is None and self.replay is None and self.symbolic is None:
            raise ValueError("ViewRecipe: needs a geometry, a replay or a symbolic geometry")

    @staticmethod
    def of(view: Any, viewed: Any, what: str, *, requires_grad: bool, may_replay: bool) -> ViewRecipe:
        """The recipe for functional ``view`` of ``viewed`` (a functional or
        fake tensor)."""
        expected = (tuple(view.size()), tuple(view.stride()), view.storage_offset())
        replayed = replayed_geometry(view, _plain(viewed))
        if replayed is not None and replayed[0] == expected[0]:
            # a view of an input whose data the program writes: the functional
            # value is a fresh contiguous tensor, eager's view is not
            expected = replayed
        replay = _checked_replay(view, _plain(viewed), expected) if may_replay else None
        if replay is None and view.dtype != viewed.dtype:  # as_strided cannot change the dtype
            raise StageError(
                STAGE, f"{what} views a tensor of dtype {viewed.dtype} as {view.dtype} in a way that cannot be replayed"
            )
        if replay is not None and not _is_concrete(expected):
            return ViewRecipe(None, replay, not requires_grad)
        if not _is_concrete(expected):
            symbolic = SymbolicGeometry.of(expected, _plain(viewed))
            if symbolic is None:
                raise SymbolicSizesUnsupported(
                    STAGE, f"{what} has sizes or strides in symbols that the tensor it views does not carry"
                )
            return ViewRecipe(None, None, not requires_grad, symbolic=symbolic)
        sizes, strides, offset = expected
        viewed_offset = viewed.storage_offset()  # only its offset: its sizes may be symbolic
        if type(viewed_offset) is not int:
            raise SymbolicSizesUnsupported(
                STAGE, f"{what} views a tensor at a symbolic storage offset; only static offsets are supported"
            )
        geometry = (sizes, strides, offset - viewed_offset)
        return ViewRecipe(geometry, replay, not requires_grad)

    def taken_under_no_grad(self) -> ViewRecipe:
        """This view as eager took it under ``no_grad`` (Note [Views taken
        under no_grad]): without the ``detach`` capture marked the region
        with, rebuilt under ``no_grad``."""
        replay = self.replay
        while replay and type(replay[-1]).__name__ == "detach_ViewMeta":
            replay = replay[:-1]
        if replay is not None and not replay:
            replay = None if self.geometry is not None else self.replay
        return dataclasses.replace(self, replay=replay, detach=False, no_grad=True)

    def regenerate(self, viewed: torch.Tensor) -> torch.Tensor:
        """The view, rebuilt from the real ``viewed`` (the per-call path)."""
        if self.no_grad:
            with torch.no_grad():
                return self._view(viewed)
        out = self._view(viewed)
        if self.detach and out.requires_grad:
            out = out.detach()
        return out

    def _view(self, viewed: torch.Tensor) -> torch.Tensor:
        if self.replay is not None:
            out = _functionalization.apply_view_meta_sequence(viewed, self.replay)  # type: ignore[arg-type]  # any sequence binds
        else:
            geometry = self.geometry if self.symbolic is None else self.symbolic(viewed)
            assert geometry is not None  # no replay means a geometry (__post_init__)
            sizes, strides, rel_offset = geometry
            out = viewed.as_strided(sizes, strides, viewed.storage_offset() + rel_offset)
        return out


def replayed_geometry(f_tensor: Any, entry: torch.Tensor) -> Geometry | None:
    """Where the view ops functionalization recorded on ``f_tensor`` (an
    input's in-place view ops: ``t_``, ``unsqueeze_``...) land when replayed on
    ``entry``, the fake of that input as the caller passed it: eager's
    geometry. The functional value's own strides and offset are not: after a
    data mutation it is a fresh, contiguous tensor. ``None`` when there is
    nothing to replay or the replay does not apply."""
    replayed = _replay(f_tensor, entry)
    if replayed is None:
        return None
    out = replayed[1]
    geometry = (tuple(out.size()), tuple(out.stride()), out.storage_offset())
    return geometry if _is_concrete(geometry) else None


def _replay(f_tensor: Any, onto: torch.Tensor) -> tuple[Sequence[Any], torch.Tensor] | None:
    """The view ops functionalization recorded on ``f_tensor``, and their
    replay on ``onto``; ``None`` when there are none or they do not apply."""
    elem = getattr(f_tensor, "elem", None)
    if elem is None or not torch._is_functional_tensor(elem):
        return None
    sequence: list[Any] = _functionalization.get_view_meta_sequence(elem)
    if not sequence or any(vm.has_symbolic_inputs for vm in sequence):
        return None
    try:
        return sequence, _functionalization.apply_view_meta_sequence(onto, sequence)
    except Exception:  # a sequence that does not apply is a fallback, not an error
        return None


def _is_concrete(geometry: SymGeometry) -> TypeGuard[Geometry]:
    sizes, strides, offset = geometry
    return all(type(v) is int for v in (*sizes, *strides, offset))


def _same(a: SymGeometry, b: SymGeometry) -> bool:
    """Equal sizes, strides and offset, also for symbolic ones (without guarding)."""
    if len(a[0]) != len(b[0]):
        return False
    pairs = [*zip(a[0], b[0], strict=True), *zip(a[1], b[1], strict=True), (a[2], b[2])]
    return all(statically_known_true(x == y) for x, y in pairs)


def _checked_replay(view: Any, viewed_fake: torch.Tensor, expected: Geometry) -> tuple[Any, ...] | None:
    replayed = _replay(view, viewed_fake)
    if replayed is None:
        return None
    sequence, out = replayed
    got = (tuple(out.size()), tuple(out.stride()), out.storage_offset())
    return tuple(sequence) if _same(got, expected) and out.dtype == view.dtype else None


def no_grad_view_outputs(graph: torch.fx.GraphModule) -> frozenset[int]:
    """The outputs that are views taken under ``no_grad`` of a tensor that
    requires grad, returned as they are.

    Note [Views taken under no_grad]: eager's ``with torch.no_grad(): v =
    x.view(-1)`` of an ``x`` that requires grad is a view of ``x`` that
    requires grad as a leaf of its own (``grad_fn`` None; a backward through
    it stops there). Capture marks the region by a ``detach`` after the view
    (``conveyor.analysis.grad_regions``), which the analysis reads as a detached
    output; the epilogue instead rebuilds such an output under ``no_grad``
    from the real tensor it views (an input, an output, an intermediate
    base), as eager made it, or, for a view of an intermediate the epilogue
    does not see, makes the inner output a leaf that requires grad. A
    ``detach()`` the program wrote itself keeps its output detached."""
    (output,) = (n for n in graph.graph.nodes if n.op == "output")
    found = set()
    for k, node in enumerate(output.args[0]):
        if not (isinstance(node, torch.fx.Node) and node.target is _DETACH and GRAD_META not in node.meta):
            continue  # not the detach capture puts after a no-grad result
        chain, steps = node.args[0], 0
        while isinstance(chain, torch.fx.Node) and chain.op == "call_function":
            if chain.target is operator.getitem:  # an output of a multi-output view (unbind, split)
                chain = chain.args[0]
                continue
            if chain.target is _DETACH or chain.meta.get(GRAD_META, True) is not False or not _is_view_node(chain):
                break
            chain, steps = chain.args[0], steps + 1
        if steps:  # capture puts the detach only after what would require grad: eager's view does
            found.add(k)
    return frozenset(found)


_DETACH = torch.ops.aten.detach.default


def _is_view_node(node: torch.fx.Node) -> bool:
    schema = getattr(node.target, "_schema", None)
    return (
        schema is not None
        and bool(schema.returns)
        and schema.returns[0].alias_info is not None
        and not schema.returns[0].alias_info.is_write
        and not any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)
    )
