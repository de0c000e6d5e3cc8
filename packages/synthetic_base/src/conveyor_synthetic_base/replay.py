"""Regenerating a merged input from its base with plain view ops.

Note [View ops, not as_strided, where they suffice]: the inner stages see
each merged input as a view of the base and, when it is mutated, scatter it
back with the inverse of that view. ``as_strided``'s inverse,
``as_strided_scatter``, has a wrong derivative for ``self`` in torch 2.13
(the gradient reaches the scattered region instead of the rest;
``torch.autograd.gradcheck`` fails on it), while ``slice``/``select``/
``view``/``permute`` invert to scatters with correct derivatives. So each
merged input is built from the base's flat elements by slicing a dense box:
narrow to the rows it spans, view as a box whose strides are its own
(when its strides divide each other), narrow each dim, select the
sub-stride position, permute back, and re-add size-1 and broadcast dims.
The result is checked against the input's layout; ``as_strided`` is the
fallback.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch


def _flat_box(flat: torch.Tensor, size: Sequence[int], stride: Sequence[int], rel: int) -> torch.Tensor | None:
    """The view of dims with size > 1 and stride > 0, from a 1-D dense
    ``flat`` whose element 0 is storage element ``flat.storage_offset()``;
    ``rel`` is the input's offset relative to it. Dims come out in the
    input's order."""
    dims = [(i, s, st) for i, (s, st) in enumerate(zip(size, stride))]
    order = sorted(dims, key=lambda d: -d[2])
    strides = [st for _, _, st in order]
    if len(order) == 1:
        (_, s, st), = order
        return flat[rel : rel + (s - 1) * st + 1 : st]
    if any(a <= b or a % b for a, b in zip(strides, strides[1:])):
        return None
    rows, row = order[0][1], strides[0]
    shape = [rows, *(a // b for a, b in zip(strides, strides[1:])), strides[-1]]
    lowest, highest = max(0, rel - row + 1), min(rel, flat.numel() - rows * row)
    for first in sorted({rel - rel % row, rel, highest}):
        if lowest <= first <= highest:
            box = _narrowed(flat.narrow(0, first, rows * row).view(shape), order, rel - first)
            if box is not None:
                break
    else:
        return None
    inverse = sorted(range(len(order)), key=lambda k: order[k][0])
    return box.permute(inverse)


def _narrowed(box: torch.Tensor, order: Sequence[tuple[int, int, int]], rem: int) -> torch.Tensor | None:
    """Narrow the box's dims to the input's sizes at offset ``rem`` from the
    box's first element, and select the position within the last stride."""
    shape = box.size()
    for k, (_, s, st) in enumerate(order[1:], start=1):
        q, rem = divmod(rem, st)
        if q + s > shape[k]:
            return None
        box = box.narrow(k, q, s)
    return box.select(len(order), rem)


def replay(base: torch.Tensor, size: Sequence[int], stride: Sequence[int], storage_offset: int) -> torch.Tensor | None:
    """The input with this layout as view ops of ``base`` (``None`` when
    the box construction does not apply or does not reproduce the layout)."""
    if not base.is_contiguous() or math.prod(size) == 0:
        return None
    flat = base.view(-1) if base.dim() != 1 else base
    rel = storage_offset - flat.storage_offset()
    core = [d for d, (s, st) in enumerate(zip(size, stride)) if s != 1 and st != 0]
    if not core:
        view = flat[rel]
    else:
        view = _flat_box(flat, [size[d] for d in core], [stride[d] for d in core], rel)
        if view is None:
            return None
    for d in range(len(size)):
        if d not in core:
            view = view.unsqueeze(d)
    if any(st == 0 and s != 1 for s, st in zip(size, stride)):
        view = view.expand(size)
    same = (
        tuple(view.size()) == tuple(size)
        and view.storage_offset() == storage_offset
        and all(a == b for s, a, b in zip(size, view.stride(), stride) if s != 1)
    )
    return view if same else None
