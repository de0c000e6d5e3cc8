"""A form of the analysis that does not depend on location ids, to compare two
analyses of one graph (the one updated in place and a rebuild).

Location ids differ between two analyses, so each location is named by the set
of nodes whose value may live in it (its *holders*); ``WILDCARD`` and ``RNG``
keep their own names. Two analyses agree when every node has the same value
locations, element locations, reads and writes under these names.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator
from dataclasses import dataclass
from typing import Protocol

import torch.fx

from conveyor_alias_db.locations import NO_EFFECTS, RNG, WILDCARD, Effects, LocId, Locs, ValueFacts


class Analysis(Protocol):
    """The public queries of ``AliasDb`` a snapshot reads."""

    def nodes(self) -> Iterator[torch.fx.Node]: ...
    def value_facts(self, value: torch.fx.Node) -> ValueFacts: ...
    def effects(self, node: torch.fx.Node) -> Effects: ...
    def expand(self, locs: Iterable[LocId]) -> Locs: ...


CanonicalLocs = frozenset[Hashable]


@dataclass(frozen=True)
class NodeSnapshot:
    """One node's analysis with locations named by their holders."""

    value: CanonicalLocs
    #: the elements of a tuple value (their reads and writes are empty)
    items: tuple[NodeSnapshot, ...] | None
    reads: CanonicalLocs
    writes: CanonicalLocs


def snapshot(db: Analysis) -> dict[torch.fx.Node, NodeSnapshot]:
    """Every analysed node's facts, with locations named by their holders."""
    holders: dict[LocId, set[torch.fx.Node]] = {}
    for node in db.nodes():
        for loc in db.value_facts(node).locs:
            holders.setdefault(loc, set()).add(node)
    names = {WILDCARD: "wildcard", RNG: "rng"}

    def name(locs: Locs) -> CanonicalLocs:
        return frozenset(names.get(loc) or frozenset(holders.get(loc, ())) for loc in db.expand(locs))

    def value(facts: ValueFacts, effects: Effects) -> NodeSnapshot:
        items = None if facts.items is None else tuple(value(i, NO_EFFECTS) for i in facts.items)
        return NodeSnapshot(name(facts.locs), items, name(effects.reads), name(effects.writes))

    return {node: value(db.value_facts(node), db.effects(node)) for node in db.nodes()}


def _show(locs: CanonicalLocs) -> str:
    shown = [loc if isinstance(loc, str) else "{" + ",".join(sorted(n.name for n in loc)) + "}" for loc in locs]  # type: ignore[attr-defined]
    return "[" + " ".join(sorted(shown)) + "]"


def differences(
    updated: dict[torch.fx.Node, NodeSnapshot], rebuilt: dict[torch.fx.Node, NodeSnapshot], limit: int = 20
) -> list[str]:
    """Human-readable differences between two snapshots (at most ``limit`` lines)."""
    lines = []
    for node in list(updated) + [n for n in rebuilt if n not in updated]:
        mine, theirs = updated.get(node), rebuilt.get(node)
        if mine == theirs:
            continue
        if mine is None or theirs is None:
            where = "a rebuild" if mine is None else "the updated analysis"
            lines.append(f"{node.name} ({node.op} {node.target}): only in {where}")
            continue
        for field in ("value", "reads", "writes"):
            a, b = getattr(mine, field), getattr(theirs, field)
            if a != b:
                lines.append(f"{node.name} ({node.target}) {field}: updated {_show(a)} != rebuilt {_show(b)}")
        if mine.items != theirs.items:
            lines.append(f"{node.name} ({node.target}) items: updated {mine.items} != rebuilt {theirs.items}")
        if len(lines) >= limit:
            break
    return lines[:limit]
