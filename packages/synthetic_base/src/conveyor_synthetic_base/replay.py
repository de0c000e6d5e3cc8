"""Regenerating a merged input from its base with plain view ops.

Note [View ops, not as_strided, where they suffice]: the inner stages see
each merged input as a view of the base and, when it is mutated, scatter it
back with the inverse of that view. ``as_strided``'s inverse,
``as_strided_scatter``, has a wrong derivative for ``self`` in torch 2.13
(the gradient reaches the scattered region instead of the rest;
``torch.autograd.gradcheck`` fails on it), while ``slice``/``select``/
``view``/``permute`` invert to scatters with correct derivatives. So each
merged input is built from the base's flat elements as a slice of a dense
*box*: narrow the flat base to a window of whole rows, view it with the
input's strides (and their gcds), slice each dim with its step, select the
position within the smallest stride, permute back, and re-add size-1 and
broadcast dims. The result is checked against the input's layout (the
strides of size-1 dims only where the input's metadata is handed back to
the caller: they address nothing else, and ``unsqueeze`` cannot choose
them); ``as_strided`` is the fallback. A box needs its whole window inside the
base, so the plan widens tight bases by up to a row (:func:`box_window`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from conveyor.stage_api import Layout


@dataclass(frozen=True)
class _Box:
    """How to cut one layout out of flat storage elements.

    :ivar order: ``(dim, size, stride)`` of the dims that move, by
        decreasing stride.
    :ivar levels: the box's strides: the largest stride, then the gcd of
        each level with the next stride; the layout's dim ``k`` is a
        slice of box dim ``k`` with step ``stride / level``.
    :ivar shape: the dense box: ``(rows, level ratios..., smallest level)``.
    """

    order: tuple[tuple[int, int, int], ...]
    levels: tuple[int, ...]
    shape: tuple[int, ...]

    @property
    def length(self) -> int:
        return math.prod(self.shape)

    @staticmethod
    def of(size: Sequence[int], stride: Sequence[int]) -> _Box | None:
        order = tuple(sorted(((d, s, t) for d, (s, t) in enumerate(zip(size, stride))), key=lambda x: -x[2]))
        strides = [t for _, _, t in order]
        if len(order) < 2 or any(a <= b for a, b in zip(strides, strides[1:])):
            return None
        levels = [strides[0]]
        for t in strides[1:]:
            levels.append(math.gcd(levels[-1], t))
        shape = (order[0][1], *(a // b for a, b in zip(levels, levels[1:])), levels[-1])
        return _Box(order, tuple(levels), shape)

    def steps(self) -> tuple[int, ...]:
        return tuple(t // level for (_, _, t), level in zip(self.order, self.levels))

    def positions(self, rem: int) -> tuple[int, ...] | None:
        """Where the layout starts in the box when its first element is
        ``rem`` elements into the box, or ``None`` if it does not fit."""
        out = [0]
        for k, ((_, s, _), level, step) in enumerate(zip(self.order, self.levels, self.steps())):
            if k == 0:
                continue
            q, rem = divmod(rem, level)
            if q + (s - 1) * step + 1 > self.shape[k]:
                return None
            out.append(q)
        return (*out, rem)

    def first(self, offset: int, lo: int, hi: int) -> int | None:
        """A storage element where a box window inside ``[lo, hi)`` can
        start, with the layout (first element ``offset``) inside it."""
        row = self.order[0][2]
        for first in range(min(offset, hi - self.length), max(lo, offset - row + 1) - 1, -1):
            if self.positions(offset - first) is not None:
                return first
        return None


def _moving(size: Sequence[int], stride: Sequence[int]) -> list[int]:
    return [d for d, (s, t) in enumerate(zip(size, stride)) if s != 1 and t != 0]


def box_window(size: Sequence[int], stride: Sequence[int], offset: int, lo: int, hi: int) -> tuple[int, int] | None:
    """The storage elements ``[start, stop)`` a view-op rebuild of this
    layout reads, choosing a window inside ``[lo, hi)`` (``None``: none fits
    or the layout needs no box)."""
    moving = _moving(size, stride)
    box = _Box.of([size[d] for d in moving], [stride[d] for d in moving])
    if box is None:
        return None
    first = box.first(offset, lo, hi)
    return None if first is None else (first, first + box.length)


def _cut(flat: torch.Tensor, size: Sequence[int], stride: Sequence[int], rel: int) -> torch.Tensor | None:
    """The moving dims (all of ``size``/``stride``), in order, from ``flat``."""
    if len(size) == 1:
        return flat[rel : rel + (size[0] - 1) * stride[0] + 1 : stride[0]]
    box = _Box.of(size, stride)
    if box is None:
        return None
    first = box.first(rel, 0, flat.numel())
    if first is None:
        return None
    view = flat.narrow(0, first, box.length).view(box.shape)
    starts = box.positions(rel - first)
    assert starts is not None
    for k, ((_, s, _), step) in enumerate(zip(box.order, box.steps())):
        if k:
            view = view[(slice(None),) * k + (slice(starts[k], starts[k] + (s - 1) * step + 1, step),)]
    view = view.select(len(box.order), starts[-1])
    return view.permute(sorted(range(len(box.order)), key=lambda k: box.order[k][0]))


Coord = tuple[int, int, int | None]  #: per base dim: (start index, step, member dim or None: a fixed index)


def box_coords(base: Layout, member: Layout) -> tuple[Coord, ...] | None:
    """Where ``member`` sits in ``base``, as one slice (or fixed index) per
    base dim, when it is a sub-box of it (``None`` otherwise). ``base``
    must not overlap itself, with each stride at least the extent of the
    smaller ones."""
    dims = sorted((k for k in range(len(base.size)) if base.size[k] > 1), key=lambda k: -base.stride[k])
    if any(base.stride[a] < base.stride[b] * base.size[b] for a, b in zip(dims, dims[1:])):
        return None
    rel = member.offset - base.offset
    start = [0] * len(base.size)
    for k in dims:
        start[k], rel = divmod(rel, base.stride[k]) if rel >= 0 else (-1, rel)
        if not 0 <= start[k] < base.size[k]:
            return None
    if rel != 0:
        return None
    step: list[int] = [1] * len(base.size)
    owner: list[int | None] = [None] * len(base.size)
    for d, (n, t) in enumerate(zip(member.size, member.stride)):
        if n == 1 or t == 0:
            continue
        fits = [
            k
            for k in dims
            if owner[k] is None
            and t % base.stride[k] == 0
            and start[k] + (n - 1) * (t // base.stride[k]) < base.size[k]
        ]
        if not fits:
            return None
        k = fits[0]
        owner[k], step[k] = d, t // base.stride[k]
    return tuple((start[k], step[k], owner[k]) for k in range(len(base.size)))


def bounding_box(base: Layout, members: Sequence[Layout]) -> Layout | None:
    """The smallest sub-box of ``base`` holding every member (each must be a
    sub-box of it)."""
    coords = [box_coords(base, m) for m in members]
    if any(c is None for c in coords):
        return None
    lo, hi = list(base.size), [0] * len(base.size)
    for m, c in zip(members, coords):
        assert c is not None
        for k, (i, step, d) in enumerate(c):
            last = i if d is None else i + (m.size[d] - 1) * step
            lo[k], hi[k] = min(lo[k], i), max(hi[k], last + 1)
    offset = base.offset + sum(lo_k * t for lo_k, t in zip(lo, base.stride))
    return Layout(base.itemsize, tuple(h - low for low, h in zip(lo, hi)), base.stride, offset)


def _sub_box(
    base: torch.Tensor, size: Sequence[int], stride: Sequence[int], storage_offset: int
) -> torch.Tensor | None:
    """The moving dims of the layout as slices of ``base``, in order."""
    coords = box_coords(Layout.of(base), Layout(base.element_size(), tuple(size), tuple(stride), storage_offset))
    if coords is None:
        return None
    index = tuple(i if d is None else slice(i, i + (size[d] - 1) * step + 1, step) for i, step, d in coords)
    owners = [d for _, _, d in coords if d is not None]
    return base[index].permute(sorted(range(len(owners)), key=lambda j: owners[j]))


def replay(
    base: torch.Tensor, size: Sequence[int], stride: Sequence[int], storage_offset: int, *, exact: bool = True
) -> torch.Tensor | None:
    """The input with this layout as view ops of ``base`` (``None`` when
    that does not reproduce the layout). With ``exact=False`` the strides of
    size-1 dims may differ (they address no other element; view ops cannot
    set them freely)."""
    if math.prod(size) == 0:
        return None
    moving = _moving(size, stride)
    if base.is_contiguous():
        flat = base.view(-1) if base.dim() != 1 else base
        rel = storage_offset - int(flat.storage_offset())
        cut = _cut(flat, [size[d] for d in moving], [stride[d] for d in moving], rel) if moving else flat[rel]
    else:
        cut = _sub_box(base, size, stride, storage_offset)
    if cut is None:
        return None
    view = _with_fixed_dims(cut, moving, size, stride)
    if any(t == 0 and s != 1 for s, t in zip(size, stride)):
        view = view.expand(size)
    same = (
        tuple(view.size()) == tuple(size)
        and view.storage_offset() == storage_offset
        and all(a == b for n, a, b in zip(size, view.stride(), stride) if exact or n != 1)
    )
    return view if same else None


def _with_fixed_dims(cut: torch.Tensor, moving: list[int], size: Sequence[int], stride: Sequence[int]) -> torch.Tensor:
    """``cut`` (the moving dims, in order) with the size-1 and broadcast dims
    put back. ``unsqueeze(p)`` gives the new dim the stride
    ``size(p) * stride(p)`` (1 at the end), so each size-1 dim is inserted
    where that is its own stride, if such a place exists, and the dims are
    permuted back into order: ``as_strided`` is then not needed for strides
    that only a size-1 dim has (the checker and ``stride()`` see them)."""
    view, labels = cut, list(moving)
    for d in range(len(size)):
        if d in moving:
            continue
        places = [
            p for p in range(view.dim() + 1) if (view.size(p) * view.stride(p) if p < view.dim() else 1) == stride[d]
        ]
        p = places[0] if places else sum(1 for k in labels if k < d)
        view = view.unsqueeze(p)
        labels.insert(p, d)
    return view.permute([labels.index(d) for d in range(len(size))]) if labels != sorted(labels) else view
