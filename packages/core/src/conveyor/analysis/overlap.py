"""Exact overlap of strided layouts that live in one storage, and of a
layout with itself.

Two inputs that share a storage interfere (a write to one changes the
other) only if some byte belongs to both. Bounds decide most pairs; two dense layouts with
intersecting bounds overlap; what is left is decided by enumerating the
elements inside the intersection of the bounds. Answers are memoized by
layout, so the per-call cache key pays for each pattern once.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Layout:
    """Where a strided tensor's elements sit in its storage.

    :ivar itemsize: bytes per element.
    :ivar size: sizes.
    :ivar stride: strides, in elements (never negative in PyTorch).
    :ivar offset: storage offset, in elements.
    """

    itemsize: int
    size: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int

    def __post_init__(self) -> None:
        if len(self.size) != len(self.stride):
            raise ValueError(f"Layout: {len(self.size)} sizes but {len(self.stride)} strides")
        if self.itemsize <= 0 or self.offset < 0 or any(s < 0 for s in (*self.size, *self.stride)):
            raise ValueError(f"Layout: negative or empty field in {self}")

    @staticmethod
    def of(t: torch.Tensor) -> Layout:
        return Layout(
            t.element_size(),
            tuple(int(s) for s in t.size()),
            tuple(int(s) for s in t.stride()),
            int(t.storage_offset()),
        )

    @staticmethod
    def dense(itemsize: int, start: int, stop: int) -> Layout:
        """The 1-D contiguous layout of elements ``[start, stop)``."""
        return Layout(itemsize, (stop - start,), (1,), start)

    @property
    def numel(self) -> int:
        return math.prod(self.size)

    @property
    def elements(self) -> tuple[int, int]:
        """``[first, last + 1)``: the element span (empty layouts: ``(offset, offset)``)."""
        return (self.offset, self.offset + span(self.size, self.stride))

    @property
    def bytes(self) -> tuple[int, int]:
        """``[lo, hi)``: the byte span."""
        start, stop = self.elements
        return (start * self.itemsize, stop * self.itemsize)

    @property
    def is_contiguous(self) -> bool:
        """Row-major dense (size-1 dims aside)."""
        expected = 1
        for s, st in reversed(list(zip(self.size, self.stride))):
            if s != 1 and st != expected:
                return False
            expected *= s
        return True

    @property
    def is_dense(self) -> bool:
        """Whether the elements cover their span exactly once."""
        dims = sorted((st, s) for s, st in zip(self.size, self.stride) if s != 1)
        expected = 1
        for st, s in dims:
            if st != expected:
                return False
            expected *= s
        return True


def span(size: Sequence[int], stride: Sequence[int]) -> int:
    """How many elements a strided layout reaches, from its first element to
    its last, both included (``0`` when it has none): the storage it needs
    beyond its offset. The one copy of the formula (the synthetic base, the
    functionalize epilogue's storage growth and the Triton backend's index
    width ask it)."""
    if any(s == 0 for s in size):
        return 0
    return sum((s - 1) * abs(st) for s, st in zip(size, stride, strict=True)) + 1


def _starts(layout: Layout) -> torch.Tensor:
    """The storage index of every element (int64, flat)."""
    index = torch.tensor(layout.offset, dtype=torch.int64)
    for s, st in zip(layout.size, layout.stride):
        index = index.unsqueeze(-1) + torch.arange(s, dtype=torch.int64) * st
    return index.reshape(-1)


def _marked(starts: torch.Tensor, width: int, lo: int, hi: int) -> torch.Tensor:
    """Positions ``[lo, hi)`` covered by units ``[start, start + width)``."""
    covered = (starts.unsqueeze(-1) + torch.arange(width, dtype=torch.int64)).reshape(-1)
    covered = covered[(covered >= lo) & (covered < hi)] - lo
    mark = torch.zeros(hi - lo, dtype=torch.bool)
    mark[covered] = True
    return mark


@functools.lru_cache(maxsize=4096)
def overlaps(a: Layout, b: Layout) -> bool:
    """Whether some byte belongs to both layouts (exact)."""
    if a.numel == 0 or b.numel == 0:
        return False
    (alo, ahi), (blo, bhi) = a.bytes, b.bytes
    lo, hi = max(alo, blo), min(ahi, bhi)
    if lo >= hi:
        return False
    if a.is_dense and b.is_dense:
        return True
    if a.itemsize == b.itemsize:  # whole elements coincide or not at all: count in elements
        lo, hi = lo // a.itemsize, hi // a.itemsize
        return bool((_marked(_starts(a), 1, lo, hi) & _marked(_starts(b), 1, lo, hi)).any())
    a_mark = _marked(_starts(a) * a.itemsize, a.itemsize, lo, hi)
    b_mark = _marked(_starts(b) * b.itemsize, b.itemsize, lo, hi)
    return bool((a_mark & b_mark).any())


#: above this many elements the exact check is not run and the layout is
#: taken to overlap itself (the fallback is always right, only slower)
_EXACT_LIMIT = 1 << 22


def overlaps_itself(t: Any) -> bool:
    """Whether two elements of ``t`` share memory (exact for static layouts;
    a symbolic one is taken not to: only stride 0 is then recognised)."""
    if not isinstance(t, torch.Tensor) or t.layout is not torch.strided:
        return False
    try:
        dims = sorted((int(st), int(n)) for n, st in zip(t.size(), t.stride()) if int(n) > 1)
    except (TypeError, ValueError, RuntimeError):  # symbolic sizes or strides
        return any(st == 0 and n != 1 for n, st in zip(t.size(), t.stride()) if isinstance(st, int))
    if any(st == 0 for st, _ in dims):
        return True
    reach = 0  # the largest offset the smaller dims reach
    for st, n in dims:
        if st <= reach:
            break
        reach += st * (n - 1)
    else:
        return False  # each stride passes what the smaller dims reach: no overlap
    numel = 1
    for _, n in dims:
        numel *= n
    if numel > _EXACT_LIMIT:
        return True
    offsets = torch.zeros((), dtype=torch.int64)
    for st, n in dims:
        offsets = (offsets.unsqueeze(-1) + torch.arange(n, dtype=torch.int64) * st).reshape(-1)
    return int(torch.unique(offsets).numel()) < numel
