"""The two calling conventions of the synthetic_base stage and the one map
between them.

*Outer* positions (``OuterIdx``) are the flat inputs the caller passes;
*inner* positions (``InnerIdx``) are what the inner stages see: every input
that is not merged, in its own place, and one synthetic base per group of
merged inputs, in the place of the group's first member. Every conversion
between the two goes through :class:`BaseMap`: ``to_inner`` at run time (the
prologue builds the bases from the caller's tensors), ``to_outer`` inside the
traced program (each merged input is regenerated from its base).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, NewType

import torch
from conveyor.stage_api import Layout

from conveyor_synthetic_base.replay import replay

OuterIdx = NewType("OuterIdx", int)
InnerIdx = NewType("InnerIdx", int)


@dataclass(frozen=True)
class AliasView:
    """One merged input, as a view of its synthetic base.

    The base keeps the caller's storage, so the storage offset is the
    input's own (absolute) offset. Fake inputs carry no recorded view
    functions to replay, so the view is rebuilt from the layout.
    ``exact_strides`` is false when the strides of size-1 dims may differ:
    only an input whose metadata the program changes hands its strides back
    to the caller (Note [View ops, not as_strided, where they suffice]).
    ``as_strided_ok``: the base is the tensor the inputs view, contiguous
    from storage offset 0, so ``as_strided`` (and the scatter that inverts
    it, ``conveyor_functionalize``'s ``index_put`` form with a right
    derivative) addresses the right elements: it gives the size-1 dims the
    caller's strides where view ops cannot (ops on the input then lay their
    results out as eager's do).
    """

    outer: OuterIdx
    size: tuple[int, ...]
    stride: tuple[int, ...]
    storage_offset: int
    exact_strides: bool = True
    as_strided_ok: bool = False

    def __post_init__(self) -> None:
        if len(self.size) != len(self.stride) or self.storage_offset < 0:
            raise ValueError(f"AliasView: inconsistent layout {self}")

    def regenerate(self, base: torch.Tensor) -> torch.Tensor:
        """View ops of the base where they reproduce the layout,
        ``as_strided`` otherwise (Note [View ops, not as_strided, where
        they suffice])."""
        view = replay(base, self.size, self.stride, self.storage_offset, exact=self.exact_strides)
        if view is None or (self.as_strided_ok and tuple(view.stride()) != self.stride):
            return base.as_strided(self.size, self.stride, self.storage_offset)
        return view


@dataclass(frozen=True)
class SyntheticBase:
    """One group of overlapping inputs, passed to the inner stages as one base.

    :ivar aliases: the merged inputs, by increasing outer position.
    :ivar anchor: the merged input the base is taken from at run time.
    :ivar from_root: take it from the anchor's ``_base`` (the tensor every
        merged input views) rather than from the anchor itself.
    :ivar view: ``None``: the base is that tensor itself; otherwise the base
        is its view with this layout (a dense 1-D range of the storage, or a
        sub-box of that tensor), the smallest holding every merged input.
    """

    aliases: tuple[AliasView, ...]
    anchor: OuterIdx
    from_root: bool
    view: Layout | None

    def __post_init__(self) -> None:
        members = [a.outer for a in self.aliases]
        if len(members) < 2 or members != sorted(set(members)):
            raise ValueError(f"SyntheticBase: needs two or more distinct increasing members, got {members}")
        if self.anchor not in members:
            raise ValueError(f"SyntheticBase: anchor {self.anchor} is not a member of {members}")
        if self.view is not None and self.view.numel == 0:
            raise ValueError(f"SyntheticBase: empty base {self.view}")

    @property
    def members(self) -> tuple[OuterIdx, ...]:
        return tuple(a.outer for a in self.aliases)

    def build(self, outer: Sequence[Any]) -> torch.Tensor:
        """The base, from the caller's (or the fake) outer inputs."""
        t = outer[self.anchor]
        if self.from_root and t._base is not None:
            t = t._base
        if self.view is None:
            return t
        return t.as_strided(self.view.size, self.view.stride, self.view.offset)


@dataclass(frozen=True)
class BaseMap:
    """Outer inputs to inner inputs and back.

    :ivar outer_count: number of outer inputs.
    :ivar passed: ``(outer, inner)`` for every input that is not merged.
    :ivar bases: ``(inner, base)`` for every synthetic base.
    """

    outer_count: int
    passed: tuple[tuple[OuterIdx, InnerIdx], ...]
    bases: tuple[tuple[InnerIdx, SyntheticBase], ...]

    def __post_init__(self) -> None:
        outers = [o for o, _ in self.passed] + [m for _, b in self.bases for m in b.members]
        if sorted(outers) != list(range(self.outer_count)):
            raise ValueError(f"BaseMap: outer inputs {sorted(outers)} are not each placed once in {self.outer_count}")
        inners = [i for _, i in self.passed] + [i for i, _ in self.bases]
        if sorted(inners) != list(range(len(inners))):
            raise ValueError(f"BaseMap: inner positions {sorted(inners)} are not 0..{len(inners) - 1}")

    @staticmethod
    def place(outer_count: int, bases: Sequence[SyntheticBase]) -> BaseMap:
        """Put each base in its first member's place; keep the other inputs
        in their order."""
        first = {b.members[0]: b for b in bases}
        merged = {m for b in bases for m in b.members}
        passed: list[tuple[OuterIdx, InnerIdx]] = []
        placed: list[tuple[InnerIdx, SyntheticBase]] = []
        for o in map(OuterIdx, range(outer_count)):
            inner = InnerIdx(len(passed) + len(placed))
            if o in first:
                placed.append((inner, first[o]))
            elif o not in merged:
                passed.append((o, inner))
        return BaseMap(outer_count, tuple(passed), tuple(placed))

    @property
    def inner_count(self) -> int:
        return len(self.passed) + len(self.bases)

    def merged(self) -> tuple[OuterIdx, ...]:
        """The outer inputs that are regenerated from a base."""
        return tuple(sorted(m for _, b in self.bases for m in b.members))

    def to_inner(self, outer: Sequence[Any]) -> list[Any]:
        """The inner inputs: passed inputs as they are, bases built from the
        outer inputs (the run-time prologue, and the inner fake inputs)."""
        inner: list[Any] = [None] * self.inner_count
        for o, i in self.passed:
            inner[i] = outer[o]
        for i, b in self.bases:
            inner[i] = b.build(outer)
        return inner

    def to_outer(self, inner: Sequence[Any]) -> list[Any]:
        """The outer inputs, each merged one regenerated from its base (run
        inside the traced program)."""
        outer: list[Any] = [None] * self.outer_count
        for o, i in self.passed:
            outer[o] = inner[i]
        for i, b in self.bases:
            for a in b.aliases:
                outer[a.outer] = a.regenerate(inner[i])
        return outer
