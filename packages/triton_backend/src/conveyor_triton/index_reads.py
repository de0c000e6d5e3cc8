"""Reads at computed indexes: ``index_select``, ``embedding``, ``gather`` and
``x[i]`` (``aten.index`` with one index tensor), as values of a fused kernel
instead of aten calls (Note [Index reads]).

Note [Index reads]: each of these ops gives an output element from one
element of its *source*, at the output element's coordinates except along
one dimension of the source, where the coordinate is read from an integer
*index* tensor at some of the output's coordinates. In a kernel that is two
loads, the index's then the source's at the address it gives
(``conveyor_triton.codegen_gather``); the value joins its users' group like
any pointwise value. Its inputs are read from memory, never as members of
the group (``ops.SHIFTED``, as ``cat``: they are read at other indexes).

:class:`IndexRead` says, per op, which output dimensions give the index's
coordinates and which give the source's. ``aten.index`` counts a negative
index from the end, as eager; the others take ``0 <= i < size``.

Bounds: an index out of range loads nothing (the source load is masked: no
memory outside the source is touched), and the kernel holds a
``tl.device_assert`` on the range; the kernel step raises eager's error
before it launches (Note [Indexes out of range], below).
A source dimension of size 0 read by a non-empty output (every index out of
range) stays an aten call.

Note [Index producers]: an index read's index may itself be an index read
used nowhere else (token type ids as BERT makes them: a ``gather`` of a
buffer at the position ids, read by the token type embedding). The index is read at some
of the output's coordinates (an embedding's leading ones), not at its
linear index, so the producer cannot be a member computed at the group's
index as an absorbed producer is (Note [Absorbed producers] in
``conveyor_triton.fusion``); instead it moves into the reading group
(``Group.at_index``) and the read recomputes it at the index's coordinates
(``codegen_gather.gather_at``): its own loads, at addresses from those
coordinates, in place of the index's load. It reads memory only (none of
its inputs is a member), so nothing else of the group is needed at other
coordinates. Hugging Face's BERT expands the gathered ids to the batch
first (``gather -> expand -> embedding``): an ``expand`` view read only by
the index read moves into the group with the producer, which is then
recomputed at the expand's source coordinates (a size-1 dimension at 0,
leading ones dropped). The view joins the producer in the fuser's working
copy first, then both fold into the reading group; it is done only in a
graph that writes no memory, where the view's order against writers (Note
[Write order] in ``conveyor_triton.fusion``) cannot matter. A producer or
view with another user stays as it was. Its bound is checked as any index
read's; the read's own index is not in memory, so on CPU the kernel step
computes it by aten calls from the producer's inputs to check its range
(Note [Indexes out of range]), and on CUDA the device assert holds it as
for a loaded one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

aten = torch.ops.aten

#: the ops read at computed indexes, by the name the report gives their kind
INDEX_READS: dict[Any, str] = {
    aten.index_select.default: "index_select",
    aten.embedding.default: "embedding",
    aten.gather.default: "gather",
    aten.index.Tensor: "index",
}

_INDEX_DTYPES = (torch.int64, torch.int32)


@dataclass(frozen=True)
class IndexRead:
    """How an output element of an index read finds its source element.

    :ivar source: the tensor read at computed indexes.
    :ivar index: the integer tensor holding them.
    :ivar dim: the source dimension the index picks.
    :ivar index_dims: the output dimensions giving the index's coordinates, in
        the index's dimension order.
    :ivar source_dims: per source dimension, the output dimension giving its
        coordinate; None for ``dim``.
    :ivar wraps: a negative index counts from the end (``aten.index``).
    """

    source: torch.fx.Node
    index: torch.fx.Node
    dim: int
    index_dims: tuple[int, ...]
    source_dims: tuple[int | None, ...]
    wraps: bool = False

    def __post_init__(self) -> None:
        if self.source_dims.count(None) != 1 or self.source_dims[self.dim] is not None:
            raise ValueError(f"source dimension {self.dim} must be the one picked by the index: {self.source_dims}")


def _meta(node: Any) -> torch.Tensor:
    return node.meta["val"]  # type: ignore[no-any-return]


def _arg(node: torch.fx.Node, position: int, name: str, default: Any = None) -> Any:
    return node.args[position] if len(node.args) > position else node.kwargs.get(name, default)


def _index_tensors(node: torch.fx.Node) -> list[tuple[int, Any]]:
    return [(p, i) for p, i in enumerate(_arg(node, 1, "indices", [])) if i is not None]


def fallback_reason(node: torch.fx.Node) -> str | None:
    """Why index read ``node`` stays an aten call, or None (its operands are
    statically shaped tensors of supported dtypes: ``classify`` checked)."""
    kind = INDEX_READS[node.target]
    if kind == "index":
        tensors = _index_tensors(node)
        if len(tensors) != 1 or not isinstance(tensors[0][1], torch.fx.Node):
            return "indexing with several index tensors (broadcast together) or none"
        index = _meta(tensors[0][1])
    else:
        index = _meta(_arg(node, 1 if kind == "embedding" else 2, "indices" if kind == "embedding" else "index"))
    source = _meta(node.args[0])
    if index.dtype not in _INDEX_DTYPES:
        return f"an index of dtype {index.dtype} (a mask, or eager raises)"
    if source.dim() == 0 or (kind == "embedding" and source.dim() != 2):
        return f"{kind} of a {source.dim()}-dim source"
    if kind == "index_select" and index.dim() > 1:
        return "index_select with an index of more than one dimension (eager raises)"
    if kind == "gather" and index.dim() != source.dim():
        return "gather with an index of another rank than the source (eager raises)"
    read = index_read(node)
    if source.shape[read.dim] == 0 and _meta(node).numel() > 0:
        return "indexes into an empty dimension (every index is out of range: eager raises)"
    return None


def index_read(node: torch.fx.Node) -> IndexRead:
    """The :class:`IndexRead` of ``node``, an op of :data:`INDEX_READS` that
    :func:`fallback_reason` accepted."""
    kind = INDEX_READS[node.target]
    source = node.args[0]
    assert isinstance(source, torch.fx.Node)
    rank = _meta(source).dim()
    if kind == "embedding":  # out: indices.shape + (embedding_dim,)
        index = _arg(node, 1, "indices")
        k = _meta(index).dim()
        return IndexRead(source, index, 0, tuple(range(k)), (None, k))
    if kind == "index":  # out: source.shape[:p] + index.shape + source.shape[p + 1:]
        ((p, index),) = _index_tensors(node)
        k = _meta(index).dim()
        dims = tuple(j if j < p else None if j == p else j + k - 1 for j in range(rank))
        return IndexRead(source, index, p, tuple(range(p, p + k)), dims, wraps=True)
    dim = int(_arg(node, 1, "dim")) % rank
    index = _arg(node, 2, "index")
    dims = tuple(None if j == dim else j for j in range(rank))
    if kind == "gather":  # out: index.shape
        return IndexRead(source, index, dim, tuple(range(rank)), dims)
    return IndexRead(source, index, dim, (dim,) if _meta(index).dim() == 1 else (), dims)  # index_select


# Note [Indexes out of range]: eager raises for an index read out of range
# (``IndexError`` from ``index_select``, ``embedding`` and ``x[i]``, a
# ``RuntimeError`` from ``gather``; on CUDA a device-side assert). A kernel's
# masked load would give 0 instead, so a kernel step holding index reads
# (Note [Index reads] in ``conveyor_triton.index_reads``) keeps each index's
# range, and before it launches:
#
# * on CPU (Triton's interpreter) it reads each index tensor's least and
#   greatest values, and when one is out of range runs its nodes as aten
#   calls instead, so the call raises eager's own error;
# * on CUDA the kernel is compiled in Triton's debug mode (``debug=True``),
#   where its ``tl.device_assert`` on the range traps as eager's device-side
#   assert does, as Inductor compiles kernels with indirect indexing;
#   reading the values on the host would wait for the GPU at every call.


@dataclass(frozen=True)
class IndexBound:
    """The range an index read's index must keep (Note [Indexes out of range]).

    :ivar index: the node of the index tensor.
    :ivar size: the length of the source dimension it picks.
    :ivar wraps: a negative index counts from the end (``x[i]``).
    """

    index: torch.fx.Node
    size: int
    wraps: bool

    def holds(self, index: torch.Tensor) -> bool:
        """Every value of ``index`` is in range."""
        if index.numel() == 0:
            return True
        least, greatest = torch.aminmax(index)
        return bool(least >= (-self.size if self.wraps else 0)) and bool(greatest < self.size)
