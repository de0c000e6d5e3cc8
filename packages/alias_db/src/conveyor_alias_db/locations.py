"""Abstract memory locations and the facts the analysis keeps per value and per node.

Note [Memory locations]
~~~~~~~~~~~~~~~~~~~~~~~
The analysis never looks at real storages. Every value (an FX node's result)
may live in a set of abstract memory locations (``LocId``). A fresh result gets
a new location; a view or an in-place result gets the locations of the argument
it aliases; graph inputs that may alias each other share one location. Two
values may alias when their location sets meet.

Two locations are special. ``WILDCARD`` stands for all memory that code the
analysis cannot see into may reach: the result of an unknown call lives there,
and a location passed to an unknown call *escapes* into it, so every escaped
location meets ``WILDCARD`` (see ``AliasDb.expand``). ``RNG`` is the state of the
random generator: ops tagged ``nondeterministic_seeded`` read and write it, so two
random ops never swap places.

A node reads and writes sets of locations (``Effects``); a write is always also
counted as a read (an in-place op reads what it writes, an ``out=`` argument is
read conservatively). Sets only ever over-approximate: "may alias" never misses
a real alias, at the price of some false ones.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NewType

LocId = NewType("LocId", int)

WILDCARD = LocId(0)
RNG = LocId(1)
_FIRST_FRESH = 2

Locs = frozenset[LocId]
NO_LOCS: Locs = frozenset()


class LocationAllocator:
    """Hands out fresh location ids (never ``WILDCARD`` or ``RNG``)."""

    def __init__(self) -> None:
        self._next = _FIRST_FRESH

    def fresh(self) -> LocId:
        loc = LocId(self._next)
        self._next += 1
        return loc


@dataclass(frozen=True)
class ValueFacts:
    """Where a value may live.

    :ivar locs: every location the value (or anything inside it, for a tuple or
        list) may live in.
    :ivar items: for a tuple-valued node (an op with several returns, a fusion
        group), the facts of each element; ``None`` for a tensor, a list (every
        element may be anywhere in ``locs``) or a non-tensor value.
    """

    locs: Locs
    items: tuple[ValueFacts, ...] | None = None

    def __post_init__(self) -> None:
        if self.items is not None:
            for item in self.items:
                if not item.locs <= self.locs:
                    raise ValueError(f"element locations {set(item.locs)} are not within the value's {set(self.locs)}")

    @staticmethod
    def of_items(items: tuple[ValueFacts, ...]) -> ValueFacts:
        """A tuple value whose elements are ``items``."""
        return ValueFacts(frozenset().union(*(i.locs for i in items)), items)

    def item(self, index: object) -> ValueFacts:
        """The facts of ``value[index]`` (anywhere in ``locs`` when the index is not a known element)."""
        if self.items is not None and isinstance(index, int) and -len(self.items) <= index < len(self.items):
            return self.items[index]
        return ValueFacts(self.locs)


@dataclass(frozen=True)
class Effects:
    """The memory a node reads and writes (a write is always also a read)."""

    reads: Locs = NO_LOCS
    writes: Locs = NO_LOCS

    def __post_init__(self) -> None:
        if not self.writes <= self.reads:
            raise ValueError(f"written locations {set(self.writes - self.reads)} are not also read")

    def __or__(self, other: Effects) -> Effects:
        return Effects(self.reads | other.reads, self.writes | other.writes)


NO_EFFECTS = Effects()
