"""Which earlier nodes a node must stay after because of memory, in one pass.

Note [Memory order edges]
~~~~~~~~~~~~~~~~~~~~~~~~~
A scheduler that reorders a graph that still writes to tensors must keep every
pair of a *writer* and a node that conflicts with it in memory (one writes what
the other reads or writes, ``AliasDb.conflicts``) in program order. Asking that
of every pair costs O(nodes x writers). ``memory_order`` gives instead, for each
node, a few earlier nodes it must follow, whose transitive closure orders every
such pair, in O(nodes x locations per node):

* writers stay in program order among themselves: each follows the previous one;
* a node that is not a writer follows the last earlier writer it conflicts with
  (that writer follows every earlier writer);
* a writer follows each earlier non-writer that conflicts with it and does not
  already precede an earlier writer it conflicts with (such a node precedes
  this writer through the writers' chain).

For a node that writes nothing, it conflicts with a writer exactly when the
memory it reads (``AliasDb.reads``, escaped locations widened to ``WILDCARD``)
meets the memory the writer writes (``AliasDb.writes``), so the pass keeps, per
location, the last writer and the nodes still waiting for their first later
writer. A *barrier* (the caller's choice, e.g. nodes whose effects it does not
trust) counts as conflicting with every writer, and so does a non-writer that
writes memory itself (a random op writes the generator state).

Every answer is known once the pass reaches the node, so ``MemoryOrder`` gives
them one node at a time, to a pass that rewrites the graph as it goes (the
triton fuser asks it as it reaches each node, of an analysis it updates in
place at every merge).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from typing import Protocol

import torch.fx

from conveyor_alias_db.locations import LocId, Locs


class Analysis(Protocol):
    """The public queries of ``AliasDb`` the pass asks."""

    def reads(self, node: torch.fx.Node) -> Locs: ...
    def writes(self, node: torch.fx.Node) -> Locs: ...


def memory_order(
    db: Analysis,
    nodes: Sequence[torch.fx.Node] | Iterable[torch.fx.Node],
    *,
    writer: Callable[[torch.fx.Node], bool],
    barrier: Callable[[torch.fx.Node], bool] = lambda node: False,
) -> dict[torch.fx.Node, list[torch.fx.Node]]:
    """For each of ``nodes`` (in program order), the earlier nodes it must follow
    because of memory (Note [Memory order edges]); nodes with none are left out.

    :param writer: the nodes kept in program order with every node they conflict with.
    :param barrier: non-writers kept in program order with every writer.
    """
    order = MemoryOrder(db, writer=writer, barrier=barrier)
    after = {}
    for node in nodes:
        edges = order.visit(node)
        if edges:
            after[node] = edges
    return after


class MemoryOrder:
    """``memory_order`` one node at a time: a pass that visits nodes in program
    order asks, as it reaches each, which earlier nodes it must follow, of the
    analysis as it is then (an ``AliasDb`` updated in place by the merges made so
    far answers as a rebuild would: the visited node's own facts do not change
    when earlier nodes move into groups). Each visit costs the node's locations.
    """

    def __init__(
        self,
        db: Analysis,
        *,
        writer: Callable[[torch.fx.Node], bool],
        barrier: Callable[[torch.fx.Node], bool] = lambda node: False,
    ) -> None:
        """:param writer: and ``barrier``: as for ``memory_order``."""
        self._db = db
        self._writer = writer
        self._barrier = barrier
        self._last_writer: torch.fx.Node | None = None
        self._last_write: dict[LocId, tuple[int, torch.fx.Node]] = {}  # location -> (writer index, writer)
        self._waiting: dict[LocId, list[torch.fx.Node]] = {}  # location -> readers with no later writer yet
        self._waiting_barriers: list[torch.fx.Node] = []
        self._covered: set[torch.fx.Node] = set()
        self._writer_index = 0

    def visit(self, node: torch.fx.Node) -> list[torch.fx.Node]:
        """The earlier visited nodes ``node`` must follow (Note [Memory order edges])."""
        db = self._db
        if self._writer(node):
            edges = self._writer_edges(node)
        elif self._barrier(node) or db.writes(node):
            edges = [] if self._last_writer is None else [self._last_writer]
            self._waiting_barriers.append(node)
        else:
            reads = db.reads(node)
            last_write = self._last_write
            found = max((last_write[loc] for loc in reads if loc in last_write), default=None, key=lambda w: w[0])
            edges = [] if found is None else [found[1]]
            for loc in reads:
                self._waiting.setdefault(loc, []).append(node)
        return list(dict.fromkeys(edges))

    def _writer_edges(self, node: torch.fx.Node) -> list[torch.fx.Node]:
        edges = [] if self._last_writer is None else [self._last_writer]
        covered = self._covered
        writes = self._db.writes(node)
        for loc in writes:
            for reader in self._waiting.pop(loc, ()):
                if reader not in covered:
                    covered.add(reader)
                    edges.append(reader)
        edges.extend(n for n in self._waiting_barriers if n not in covered)
        covered.update(self._waiting_barriers)
        self._waiting_barriers = []
        self._writer_index += 1
        for loc in writes:
            self._last_write[loc] = (self._writer_index, node)
        self._last_writer = node
        return edges
