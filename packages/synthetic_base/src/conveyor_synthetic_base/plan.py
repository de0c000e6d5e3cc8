"""Which inputs to merge into which synthetic base (compile time, pure).

Inputs that share a storage are merged only when it matters: a group of
inputs connected by exact overlap is merged when one of them has its data
mutated (a metadata mutation changes only the tensor it is applied to, so it
needs no base, unless it can move the view onto other elements). A base also takes in every other input its range would
otherwise write back over: a data-mutated input, or another group, that
overlaps the base. Non-overlapping inputs, and overlapping ones that no one
mutates, are left alone.

The base is the tensor every merged input views (their common ``_base``)
when that tensor is contiguous and exactly the range they use; otherwise the
smaller of the dense 1-D range of the storage holding them all and, when
each is a sub-box of that tensor (slices, steps, transposes), their bounding
box in it, as a view of that tensor (or of one member when they view no
common tensor: the range). A smaller base is a
smaller write-back: the inner stages copy back the whole base when any
merged input is mutated.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from conveyor.stage_api import Layout, overlaps

from conveyor_synthetic_base.mapping import AliasView, OuterIdx, SyntheticBase
from conveyor_synthetic_base.replay import bounding_box, box_window, replay
from conveyor_synthetic_base.sharing import SharedStorage


class PlanError(ValueError):
    """The inputs cannot be merged without changing what the program means."""


@dataclass(frozen=True)
class Mutations:
    """Which outer inputs the program mutates (as seen through each input).

    :ivar data: inputs whose values are written.
    :ivar metadata: inputs whose sizes, strides or offset change.
    :ivar moves_views: the program has an in-place op that can move a view
        onto other elements of its storage (``as_strided_``, ``set_``,
        ``resize_``), not only reorder its own (``t_``, ``unsqueeze_``...).
    """

    data: frozenset[OuterIdx]
    metadata: frozenset[OuterIdx]
    moves_views: bool = False


def plan(shared: Sequence[SharedStorage], mutations: Mutations, *, tight: bool = True) -> tuple[SyntheticBase, ...]:
    """The synthetic bases for inputs that share storage.

    :param tight: use the smallest dense range as the base even when the
        merged inputs view a larger common tensor (``False``: the common
        tensor itself, as PyTorch does).
    """
    return tuple(b for s in shared for b in _plan_storage(s, mutations, tight))


class _Groups:
    """Union-find over the members of one storage (indices into members)."""

    def __init__(self, n: int) -> None:
        self.parent = list(range(n))

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def union(self, i: int, j: int) -> bool:
        ri, rj = self.find(i), self.find(j)
        if ri == rj:
            return False
        self.parent[max(ri, rj)] = min(ri, rj)
        return True

    def groups(self) -> list[list[int]]:
        out: dict[int, list[int]] = {}
        for i in range(len(self.parent)):
            out.setdefault(self.find(i), []).append(i)
        return list(out.values())


def _plan_storage(s: SharedStorage, mutations: Mutations, tight: bool) -> list[SyntheticBase]:
    n = len(s.members)
    data = [m in mutations.data for m in s.members]
    layouts = [t.layout for t in s.tensors]
    g = _Groups(n)
    for i in range(n):
        for j in range(i + 1, n):
            if overlaps(layouts[i], layouts[j]):
                g.union(i, j)
    # A view moved (as_strided_, set_...) onto what another input covers would
    # read or write it behind functionalization's back: with data mutated in
    # this storage, merge it.
    for i in range(n):
        if mutations.moves_views and s.members[i] in mutations.metadata:
            for j in range(n):
                if data[j]:
                    g.union(i, j)
    while True:
        merged = [grp for grp in g.groups() if len(grp) > 1 and any(data[i] for i in grp)]
        changed = False
        for grp in merged:
            extent = _choose(s, grp, tight, mutations)[3]
            for k in range(n):
                if k not in grp and overlaps(layouts[k], extent):
                    changed |= g.union(grp[0], k)
        if not changed:
            break
    bases = []
    for grp in merged:
        anchor, from_root, view, _ = _choose(s, grp, tight, mutations)
        root = s.root_tensors[grp[0]].layout
        # as_strided off the base addresses the right elements only off a base starting the storage
        strided_ok = from_root and view is None and root.is_contiguous and root.offset == 0
        aliases = tuple(
            AliasView(
                s.members[i],
                layouts[i].size,
                layouts[i].stride,
                layouts[i].offset,
                exact_strides=s.members[i] in mutations.metadata,
                as_strided_ok=strided_ok,
            )
            for i in grp
        )
        bases.append(SyntheticBase(aliases, anchor, from_root, view))
    return bases


def _choose(
    s: SharedStorage, grp: list[int], tight: bool, mutations: Mutations
) -> tuple[OuterIdx, bool, Layout | None, Layout]:
    """The base of one group: ``(anchor, from_root, view, extent)``."""
    names = [int(s.members[i]) for i in grp]
    dtypes = {s.tensors[i].dtype for i in grp}
    if len(dtypes) > 1:
        raise PlanError(
            f"inputs {names} overlap and one is mutated, but they have different dtypes "
            f"{sorted(map(str, dtypes))}; a synthetic base has one dtype"
        )
    (dtype,) = dtypes
    layouts = [s.tensors[i].layout for i in grp]
    start = min(layout.elements[0] for layout in layouts)
    stop = max(layout.elements[1] for layout in layouts)
    root = s.root_tensors[grp[0]].layout
    from_root = len({s.roots[i] for i in grp}) == 1 and s.root_tensors[grp[0]].dtype == dtype
    if not from_root and any(s.tensors[i].requires_grad for i in grp):
        raise PlanError(
            f"inputs {names} overlap, one is mutated and they require grad, but they are not views "
            "of one tensor of their dtype: no base can carry the gradients of each"
        )
    anchor = s.members[grp[0]]
    exact = [s.members[i] in mutations.metadata for i in grp]
    if from_root and root.is_contiguous and root.offset == 0:
        # every member's size-1 strides too: where view ops cannot give them, the base is the
        # whole tensor and as_strided gives them (AliasView.as_strided_ok)
        exact = [True] * len(grp)
    if not from_root:
        span = Layout.dense(layouts[0].itemsize, start, stop)
        if not _rebuilt_by_views(span, layouts, exact):
            # as_strided off the storage's dense range from offset 0 (its scatter reads offsets
            # from there); no member requires grad (checked above)
            whole = Layout.dense(layouts[0].itemsize, 0, stop)
            return anchor, False, whole, whole
        return anchor, False, span, span
    if not tight:
        if not _rebuilt_by_views(root, layouts, exact):
            _check_as_strided_is_safe(s, grp, root)
        return anchor, True, None, root
    start, stop = _widened(s, grp, start, stop, root.elements)  # Note [View ops, not as_strided, where they suffice]
    span = Layout.dense(layouts[0].itemsize, start, stop)
    candidates: list[Layout | None] = [span]
    if root.is_contiguous:
        box = bounding_box(root, layouts)
        candidates[:0] = [None] * (root.elements == (start, stop)) + [box] * (box is not None)
    fit = [c for c in candidates if _rebuilt_by_views(root if c is None else c, layouts, exact)]
    if not fit:
        _check_as_strided_is_safe(s, grp, root)
        return anchor, True, None, root
    view = min(fit, key=lambda c: root.numel if c is None else c.numel)  # first of the smallest
    return anchor, True, view, root if view is None else view


def _check_as_strided_is_safe(s: SharedStorage, grp: list[int], root: Layout) -> None:
    """Some member needs ``as_strided`` off the base. Functionalization
    scatters it back with ``as_strided_scatter``, which reads the offset
    relative to the base, so the base must start the storage, contiguous.
    (Its derivative in torch 2.13 is wrong, but ``conveyor_functionalize``
    spells it as an ``index_put`` into the base's buffer, which autograd
    differentiates right: a mutated input that requires grad is fine.)"""
    names = [int(s.members[i]) for i in grp]
    if not (root.is_contiguous and root.offset == 0):
        raise PlanError(
            f"inputs {names} overlap and one is mutated, but view ops cannot rebuild each from one base and "
            "the tensor they view is not contiguous from storage offset 0, which as_strided needs"
        )


_INT_OF_SIZE = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64, 16: torch.complex128}


def _rebuilt_by_views(base: Layout, members: list[Layout], exact: list[bool]) -> bool:
    """Whether every member can be rebuilt from this base with view ops
    (tried on a meta tensor, with the same code the traced program runs):
    ``as_strided`` off a base that is not a dense range is not safe to
    functionalize."""
    storage = torch.empty(
        max(base.elements[1], *(m.elements[1] for m in members)), dtype=_INT_OF_SIZE[base.itemsize], device="meta"
    )
    t = storage.as_strided(base.size, base.stride, base.offset)
    return all(replay(t, m.size, m.stride, m.offset, exact=e) is not None for m, e in zip(members, exact))


def _widened(s: SharedStorage, grp: list[int], start: int, stop: int, root: tuple[int, int]) -> tuple[int, int]:
    """The span, widened inside the root's range where a member's view-op
    rebuild needs whole rows the span does not hold."""
    for i in grp:
        layout = s.tensors[i].layout
        args = (layout.size, layout.stride, layout.offset)
        if box_window(*args, start, stop) is None and (window := box_window(*args, *root)) is not None:
            start, stop = min(start, window[0]), max(stop, window[1])
    return start, stop
