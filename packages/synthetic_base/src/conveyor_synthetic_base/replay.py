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


def replay(
    base: torch.Tensor, size: Sequence[int], stride: Sequence[int], storage_offset: int, *, exact: bool = True
) -> torch.Tensor | None:
    """The input with this layout as view ops of ``base`` (``None`` when
    that does not reproduce the layout). With ``exact=False`` the strides of
    size-1 dims may differ (they address no other element; view ops cannot
    set them freely)."""
    if not base.is_contiguous() or math.prod(size) == 0:
        return None
    flat = base.view(-1) if base.dim() != 1 else base
    rel = storage_offset - int(flat.storage_offset())
    moving = _moving(size, stride)
    cut = _cut(flat, [size[d] for d in moving], [stride[d] for d in moving], rel) if moving else flat[rel]
    if cut is None:
        return None
    view = cut
    for d in range(len(size)):
        if d not in moving:
            view = view.unsqueeze(d)
    if any(t == 0 and s != 1 for s, t in zip(size, stride)):
        view = view.expand(size)
    same = (
        tuple(view.size()) == tuple(size)
        and view.storage_offset() == storage_offset
        and all(a == b for n, a, b in zip(size, view.stride(), stride) if exact or n != 1)
    )
    return view if same else None
