"""Writes at computed indexes: ``scatter_add``, ``scatter`` (a tensor or a
scalar), ``scatter_reduce(..., "sum")`` (with or without ``self``), ``index_put`` (``index_add``
decomposes to it with ``accumulate=True``) and ``embedding_dense_backward`` (kept whole
by the decomposition table) as generated kernels (Note [Scatters]).

Note [Scatters]: each of these functional ops returns a copy of its
destination (``self``) in which some elements received a value of its
*source* (``embedding_dense_backward``: zeros receive the gradient's rows,
but those of ``padding_idx``). The step copies ``self`` into an output laid
out as eager's (the strides a kernel stores a graph output with), then launches a
kernel over the *source's* elements (the index's, for ``scatter``), not over
the output's: each program loads its elements' indexes and source values
and stores them (``scatter``) or adds them with ``tl.atomic_add``
(``conveyor_triton.codegen_scatter``) at the addresses the indexes give.
A scatter is a step of its own (``conveyor_triton.scatter_step``): fusion
groups compute one value per output element, which a scatter does not.

:class:`Scatter` says which coordinates of the element the kernel visits
give the index's, the source's and the destination's.

Exactness. Which of several values meeting at one destination element is
added first, or stored last, is the question:

* eager's CPU kernels visit the source's elements of one destination in
  index order (``scatter_add`` and ``scatter`` loop along ``dim`` inside each
  element of the other dimensions; ``index_add`` loops over the index;
  ``index_put``'s accumulating kernel runs serially over its iterator). The
  kernel's linear order over the visited elements (row-major) puts them in
  the same order, and Triton's interpreter runs programs one after the other
  and a block's atomics element by element, so on CPU a scatter is bitwise
  eager's (the tests check at ``atol = rtol = 0``, tighter than the checker's
  default, torch.testing's 1.3e-6 relative for float32); where eager's
  iterator reorders dimensions by stride the sums may differ in the last
  bits, within that default;
* eager's CUDA kernels add with atomics, in no fixed order, and store
  duplicates in no fixed order (its documentation calls the result
  undefined); the kernel does the same. ``embedding_dense_backward`` is the
  exception: eager's CUDA kernel sorts the indexes and is deterministic,
  where the kernel adds with atomics, as Inductor's lowering does (sums equal
  up to their order). When deterministic algorithms are on
  (``torch.use_deterministic_algorithms``), checked at every run, a CUDA
  scatter that stores or adds floats runs eager's own op instead;
* ``index_put`` without ``accumulate`` stores; eager's CPU kernel stores in
  parallel, so which of two equal indexes wins is not eager's to promise and
  not ours to match: on CPU the step checks that the (wrapped) indexes are
  distinct before it launches and runs eager's op when two are equal; on
  CUDA the stores race as eager's do.

``scatter_reduce(..., "sum", include_self=False)`` first stores zeros at
every address the indexes give (a second kernel, launched before the adds),
as eager does.

Adds cover float32, float64, int32 and int64 (``tl.atomic_add``'s types that
Triton's interpreter also runs: it has no bfloat16 atomics and raises on a
float16 sum that overflows); stores every dtype but bool.

Bounds: an index out of range raises eager's error, as for the index reads
(Note [Indexes out of range] in ``conveyor_triton.index_reads``): on CPU the
step reads the index's range before launching and runs eager's op when it is
out; on CUDA the kernel's ``tl.device_assert`` traps in Triton's debug mode.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.fx

from conveyor_triton.dtypes import fits
from conveyor_triton.index_reads import IndexBound

aten = torch.ops.aten

#: the ops written as scatters, by the name their kernels get
SCATTERS: dict[Any, str] = {
    aten.scatter_add.default: "scatter_add",
    aten.scatter.src: "scatter",
    aten.scatter.value: "scatter",
    aten.scatter_reduce.two: "scatter_reduce",
    aten.index_put.default: "index_put",
    aten.embedding_dense_backward.default: "embedding_dense_backward",
}

#: dtypes ``tl.atomic_add`` adds on a GPU and in Triton's interpreter alike
ADD_DTYPES = (torch.float32, torch.float64, torch.int32, torch.int64)

Mode = Literal["add", "store"]


@dataclass(frozen=True)
class Scatter:
    """How the kernel of a scatter finds its addresses (Note [Scatters]).

    :ivar dest: the tensor whose copy is written; None: zeros
        (``embedding_dense_backward``'s weight gradient).
    :ivar index: the integer tensor of destination indexes.
    :ivar source: the values written (a node), or one scalar for every element.
    :ivar mode: ``"add"`` (atomic adds) or ``"store"``.
    :ivar shape: the elements the kernel visits.
    :ivar dim: the destination dimension the index picks.
    :ivar index_dims: the visited dimensions giving the index's coordinates.
        The source's come from the visited dimensions aligned to its trailing
        ones (it broadcasts along its size-1 dimensions).
    :ivar dest_dims: per destination dimension, the visited dimension giving
        its coordinate; None for ``dim``.
    :ivar wraps: a negative index counts from the end (``index_put``).
    :ivar skip: an index whose elements are not written (an embedding's
        ``padding_idx``), or None.
    :ivar clears: the elements written start from zero, not from the
        destination's value (``scatter_reduce(..., include_self=False)``): a
        first kernel stores zeros at the same addresses.
    :ivar dtype: the destination's dtype; ``index_dtype``: the index's;
        ``dest_shape``: the destination's shape.

    Read off the graph when the step is made: a program loaded from the disk
    cache has nodes without their metadata.
    """

    dest: torch.fx.Node | None
    index: torch.fx.Node
    source: torch.fx.Node | bool | int | float
    mode: Mode
    shape: tuple[int, ...]
    dim: int
    index_dims: tuple[int, ...]
    dest_dims: tuple[int | None, ...]
    wraps: bool
    dtype: torch.dtype
    index_dtype: torch.dtype
    dest_shape: tuple[int, ...]
    skip: int | None = None
    clears: bool = False

    def __post_init__(self) -> None:
        if self.dest_dims.count(None) != 1 or self.dest_dims[self.dim] is not None:
            raise ValueError(f"destination dimension {self.dim} must be the one picked by the index: {self.dest_dims}")

    @property
    def distinct(self) -> bool:
        """Whether the kernel gives eager's result only for distinct indexes
        (``index_put`` without ``accumulate``: Note [Scatters])."""
        return self.mode == "store" and self.wraps

    @property
    def bound(self) -> IndexBound:
        """The range the index must keep (Note [Indexes out of range])."""
        return IndexBound(self.index, self.size, self.wraps)

    @property
    def size(self) -> int:
        """The length of the destination dimension the index picks."""
        return self.dest_shape[self.dim]


def _meta(node: Any) -> torch.Tensor:
    return node.meta["val"]  # type: ignore[no-any-return]


def _arg(node: torch.fx.Node, position: int, name: str, default: Any = None) -> Any:
    return node.args[position] if len(node.args) > position else node.kwargs.get(name, default)


def fallback_reason(node: torch.fx.Node) -> str | None:
    """Why scatter ``node`` stays an aten call, or None (its tensor operands
    are statically shaped tensors of supported dtypes: ``classify`` checked)."""
    kind = SCATTERS[node.target]
    out = _meta(node)
    if kind == "scatter_reduce":
        if _arg(node, 4, "reduce") != "sum":
            return "scatter_reduce other than a sum (prod, mean, amax, amin: no kernel yet)"
    if kind == "index_put":
        tensors = [i for i in _arg(node, 1, "indices") if i is not None]
        if len(tensors) != 1 or not isinstance(tensors[0], torch.fx.Node):
            return "index_put with several index tensors (broadcast together) or none"
    if kind == "embedding_dense_backward":
        if _arg(node, 4, "scale_grad_by_freq"):
            return "embedding_dense_backward with scale_grad_by_freq (no kernel yet)"
        if _meta(node.args[0]).dim() != _meta(node.args[1]).dim() + 1:
            return "embedding_dense_backward of a gradient of another rank than the indices' plus one"
    mode: Mode = (
        "store" if kind == "scatter" or (kind == "index_put" and not _arg(node, 3, "accumulate", False)) else "add"
    )
    if mode == "add" and out.dtype not in ADD_DTYPES:
        return f"an atomic add of {out.dtype} (Note [Scatters]: float32, float64, int32 and int64 only)"
    if mode == "store" and out.dtype is torch.bool:
        return "a scatter of bool"
    if out.dim() == 0:
        return "a scatter into a 0-dim tensor"
    if kind in ("scatter", "scatter_add", "scatter_reduce") and _meta(_arg(node, 2, "index")).dim() != out.dim():
        return "a scatter with an index of another rank than the destination"
    s = scatter(node)
    if not isinstance(s.source, torch.fx.Node) and not _exact_literal(s.source, out.dtype):
        return f"a scalar {s.source!r} that {out.dtype} does not hold exactly as a Triton literal"
    if _meta(s.index).dtype not in (torch.int64, torch.int32):
        return f"an index of dtype {_meta(s.index).dtype} (a mask, or eager raises)"
    if isinstance(s.source, torch.fx.Node):
        source = _meta(s.source)
        if source.dtype != out.dtype:
            return "a source of another dtype than the destination (eager raises)"
        if not _covers(tuple(source.shape), s.shape, broadcasts=kind == "index_put"):
            return "a source that does not cover the elements written (eager raises)"
    index = _meta(s.index)
    if kind in ("scatter", "scatter_add", "scatter_reduce") and any(
        index.shape[d] > out.shape[d] for d in range(out.dim()) if d != s.dim
    ):
        return "an index larger than the destination (eager raises)"
    if out.shape[s.dim] == 0 and _numel(s.shape) > 0:
        return "indexes into an empty dimension (every index is out of range: eager raises)"
    return None


def _exact_literal(value: Any, dtype: torch.dtype) -> bool:
    """Whether scalar ``value`` converted to ``dtype`` (as eager converts it)
    is written exactly by a Triton literal (a float one is a float32)."""
    if not fits(value, dtype):
        return False
    if not dtype.is_floating_point:
        return not isinstance(value, float)
    converted = float(torch.tensor(value, dtype=dtype).item())
    return math.isnan(converted) or float(torch.tensor(converted, dtype=torch.float32).item()) == converted


def _covers(source: tuple[int, ...], shape: tuple[int, ...], broadcasts: bool) -> bool:
    """Whether a source of shape ``source`` has an element at every visited
    coordinate: it broadcasts to ``shape`` (``index_put``), or is no smaller
    along any dimension (``scatter``)."""
    if len(source) > len(shape):
        return False
    pad = len(shape) - len(source)
    if broadcasts:
        return all(s in (1, shape[j + pad]) for j, s in enumerate(source))
    return pad == 0 and all(s >= n for s, n in zip(source, shape))


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for s in shape:
        n *= s
    return n


def scatter(node: torch.fx.Node) -> Scatter:
    """The :class:`Scatter` of ``node``, an op of :data:`SCATTERS` whose
    indexes are in one tensor."""
    kind = SCATTERS[node.target]
    if kind == "embedding_dense_backward":  # visits grad.shape = indices.shape + (embedding_dim,)
        grad, index = node.args[0], node.args[1]
        assert isinstance(grad, torch.fx.Node) and isinstance(index, torch.fx.Node)
        k = _meta(index).dim()
        out = _meta(node)
        shape = tuple(_meta(grad).shape)
        return Scatter(
            None,
            index,
            grad,
            "add",
            shape,
            0,
            tuple(range(k)),
            (None, k),
            False,
            out.dtype,
            _meta(index).dtype,
            tuple(out.shape),
            int(_arg(node, 3, "padding_idx")),
        )
    dest = node.args[0]
    assert isinstance(dest, torch.fx.Node)
    rank = _meta(dest).dim()
    if kind == "index_put":  # visits dest.shape[:p] + index.shape + dest.shape[p + 1:]
        indices = list(_arg(node, 1, "indices"))
        p = next(j for j, i in enumerate(indices) if i is not None)
        index = indices[p]
        k = _meta(index).dim()
        shape = (*_meta(dest).shape[:p], *_meta(index).shape, *_meta(dest).shape[p + 1 :])
        dims = tuple(j if j < p else None if j == p else j + k - 1 for j in range(rank))
        return Scatter(
            dest,
            index,
            _arg(node, 2, "values"),
            "add" if _arg(node, 3, "accumulate", False) else "store",
            tuple(shape),
            p,
            tuple(range(p, p + k)),
            dims,
            True,
            *_dtypes(dest, index),
        )
    dim = int(_arg(node, 1, "dim")) % rank
    index = _arg(node, 2, "index")
    source = _arg(node, 3, "value" if node.target is aten.scatter.value else "src")
    mode: Mode = "store" if kind == "scatter" else "add"
    dims = tuple(None if j == dim else j for j in range(rank))
    return Scatter(
        dest,
        index,
        source,
        mode,
        tuple(_meta(index).shape),
        dim,
        tuple(range(rank)),
        dims,
        False,
        *_dtypes(dest, index),
        clears=kind == "scatter_reduce" and not _arg(node, 5, "include_self", True),
    )


def _dtypes(dest: torch.fx.Node, index: torch.fx.Node) -> tuple[torch.dtype, torch.dtype, tuple[int, ...]]:
    return _meta(dest).dtype, _meta(index).dtype, tuple(_meta(dest).shape)
