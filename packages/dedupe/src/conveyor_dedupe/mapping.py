"""The two calling conventions of the dedupe stage and the one map between them.

*Outer* positions are the flat arguments the caller passes (``OuterIdx``);
*inner* positions are the distinct tensors the inner stages see (``InnerIdx``).
Every conversion between the two goes through :class:`DedupeMap`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NewType, TypeVar

import torch

OuterIdx = NewType("OuterIdx", int)
InnerIdx = NewType("InnerIdx", int)
T = TypeVar("T")


def first_positions(flat: Sequence[Any]) -> tuple[OuterIdx, ...]:
    """For each flat argument, the first position holding the same tensor
    object (by identity); non-tensors are never duplicates of anything.

    This is the stage's cache key: it runs on every call, so it is one pass
    over the arguments with a dict of ids.
    """
    first: dict[int, OuterIdx] = {}
    out: list[OuterIdx] = []
    for i, v in enumerate(flat):
        pos = OuterIdx(i)
        out.append(first.setdefault(id(v), pos) if isinstance(v, torch.Tensor) else pos)
    return tuple(out)


@dataclass(frozen=True)
class DedupeMap:
    """Which outer argument each inner input is, and back.

    :ivar kept: for each inner position, the outer position it is taken from
        (the first occurrence of that tensor), increasing.
    :ivar inner_of: for each outer position, the inner position holding its
        tensor.
    """

    kept: tuple[OuterIdx, ...]
    inner_of: tuple[InnerIdx, ...]

    def __post_init__(self) -> None:
        if list(self.kept) != sorted(set(self.kept)):
            raise ValueError(f"DedupeMap: kept positions {self.kept} must be distinct and increasing")
        for inner, outer in enumerate(self.kept):
            if not 0 <= outer < len(self.inner_of) or self.inner_of[outer] != inner:
                raise ValueError(f"DedupeMap: inner {inner} is kept from outer {outer}, which maps elsewhere")
        for position, inner in enumerate(self.inner_of):
            if not 0 <= inner < len(self.kept) or self.kept[inner] > position:
                raise ValueError(f"DedupeMap: outer {position} maps to inner {inner}, not an earlier kept argument")

    @staticmethod
    def from_first_positions(first: Sequence[int]) -> DedupeMap:
        """The map for arguments whose first occurrences are ``first``
        (as :func:`first_positions` gives, or the program record's
        ``aliasing.same``)."""
        kept = tuple(OuterIdx(o) for o, f in enumerate(first) if f == o)
        inner_at = {outer: InnerIdx(i) for i, outer in enumerate(kept)}
        return DedupeMap(kept, tuple(inner_at[OuterIdx(f)] for f in first))

    @property
    def has_duplicates(self) -> bool:
        return len(self.kept) != len(self.inner_of)

    def duplicates(self) -> tuple[tuple[OuterIdx, OuterIdx], ...]:
        """``(duplicate, first occurrence)`` for every outer position that
        repeats an earlier one."""
        return tuple((OuterIdx(o), self.kept[i]) for o, i in enumerate(self.inner_of) if self.kept[i] != o)

    def to_inner(self, outer: Sequence[T]) -> list[T]:
        """The inner arguments from the outer ones (drops the repeats)."""
        return [outer[o] for o in self.kept]

    def to_outer(self, inner: Sequence[T]) -> list[T]:
        """The outer arguments from the inner ones (repeats each tensor in
        every position it was passed in)."""
        return [inner[i] for i in self.inner_of]
