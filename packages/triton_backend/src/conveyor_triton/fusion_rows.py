"""Row groups: where a reduction or a scan goes (Note [Linear index] in
``conveyor_triton.fusion``).

Note [Permuted groups]: a reduction over leading dimensions (a bias or norm
weight gradient sums over the batch) addresses its full values with the
dimensions permuted (kept ones first, reduced ones last), so the reduced
elements of one output again sit in one row. Every full value of such a group
has the same logical shape (no views), loads and stores go through the
permuted sizes and strides, and row values keep the natural order of the kept
dimensions.
"""

from __future__ import annotations

import math
from typing import Protocol, cast

import torch.fx

from conveyor_triton.domain import Kind, reduction_dims
from conveyor_triton.domain import numel as _numel
from conveyor_triton.domain import shape as _shape
from conveyor_triton.ops import RULES
from conveyor_triton.steps import Ancestors, Group, StepGraph

__all__ = ["CANDIDATES", "RowFusing", "fits", "reduction", "scan", "set_reduction"]

#: Groups a node considers for horizontal fusion (the most recent groups that
#: read one of its inputs) and for a shared reduction domain (the most recent
#: groups reducing the same rows): older ones mostly depend on the node's inputs
#: already, and asking each costs the steps in between (inductor bounds its
#: pairwise fusion attempts in the same way).
CANDIDATES = 32


class RowFusing(Protocol):
    """What placing a reduction or a scan needs of the fuser
    (``conveyor_triton.fusion.Fuser``): its public API."""

    graph: StepGraph
    group_of: dict[torch.fx.Node, Group]

    def join(self, node: torch.fx.Node, group: Group, kind: Kind, ancestors: Ancestors | None = None) -> bool: ...
    def new_group(self, node: torch.fx.Node, kind: Kind, position: int, numel: int) -> Group: ...
    def sharing(self, node: torch.fx.Node, shape: tuple[int, ...]) -> list[Group]: ...
    def outside(self, node: torch.fx.Node, group: Group) -> set[int]: ...
    def reducing(self, group: Group) -> None: ...
    def reducing_groups(self, domain: tuple[object, ...]) -> list[Group]: ...


def reduction(fuser: RowFusing, node: torch.fx.Node, position: int) -> None:
    """A reduction joins the group of its source, or a group already reducing
    rows of its domain, or starts a row group."""
    source = node.args[0]
    shape = _shape(source)  # type: ignore[arg-type]
    dims = reduction_dims(node)
    reduce = math.prod(shape[d] for d in dims)
    trailing = dims == tuple(range(len(shape) - len(dims), len(shape)))
    perm = None if trailing else tuple(d for d in range(len(shape)) if d not in dims) + dims
    rows = _numel(node)
    group = fuser.group_of.get(source)  # type: ignore[arg-type]
    if group is not None and group.members[source] == "full" and fits(group, shape, perm, reduce, rows):  # type: ignore[index]
        if fuser.join(node, group, "row"):
            set_reduction(fuser, group, shape, perm, dims, reduce, rows)
            return
    # read from outside: any group already reducing rows of this domain
    # takes it (one launch instead of two, reads shared or not)
    key = (math.prod(shape), reduce, rows, perm, shape if perm is not None else None)
    domain = fuser.reducing_groups(key)[-CANDIDATES:][::-1]  # most recent first
    ancestors = None  # of the same outside steps for every group but the source's: explored once
    for shared in dict.fromkeys([*fuser.sharing(node, shape), *domain]):
        if shared is not group:
            ancestors = ancestors or fuser.graph.ancestors(fuser.outside(node, shared))
            if fits(shared, shape, perm, reduce, rows) and fuser.join(node, shared, "row", ancestors):
                set_reduction(fuser, shared, shape, perm, dims, reduce, rows)
                return
    group = fuser.new_group(node, "row", position, math.prod(shape))
    set_reduction(fuser, group, shape, perm, dims, reduce, rows)


def fits(group: Group, shape: tuple[int, ...], perm: tuple[int, ...] | None, reduce: int, rows: int) -> bool:
    """Whether a reduction of a ``shape`` value (addressed in ``perm``
    order) over ``reduce`` elements per row can join ``group``."""
    if group.numel != math.prod(shape):
        return False
    if group.reduce is not None:
        return (group.reduce, group.rows, group.perm) == (reduce, rows, perm) and (perm is None or group.shape == shape)
    if perm is None:
        return True
    # a pointwise group becomes permuted: every member must be a full value of this very shape
    return all(_shape(n) == shape and n.target in RULES for n in group.members)


def set_reduction(
    fuser: RowFusing,
    group: Group,
    shape: tuple[int, ...],
    perm: tuple[int, ...] | None,
    dims: tuple[int, ...],
    reduce: int,
    rows: int,
) -> None:
    """Record that ``group`` reduces ``reduce`` elements per row of a ``shape`` value
    (over ``dims``, addressed in ``perm`` order when not None)."""
    first = group.reduce is None
    group.reduce, group.rows = reduce, rows
    if perm is not None:
        group.perm, group.shape, group.reduced = perm, shape, tuple(perm[len(perm) - len(dims) :])
    if first:
        fuser.reducing(group)


def scan(fuser: RowFusing, node: torch.fx.Node, position: int) -> None:
    """A scan along a dimension starts a row group over that dimension (a
    permuted one for another dimension than the last: Note [Permuted
    groups]), as a full value (Note [Scans] in ``conveyor_triton.codegen_scan``);
    its users join it as they join any group."""
    shape = _shape(node)
    d = cast(int, node.args[1] if len(node.args) > 1 else node.kwargs["dim"]) % len(shape)
    perm = None if d == len(shape) - 1 else (*(k for k in range(len(shape)) if k != d), d)
    group = fuser.new_group(node, "full", position, math.prod(shape))
    set_reduction(fuser, group, shape, perm, (d,), shape[d], math.prod(shape) // shape[d])
