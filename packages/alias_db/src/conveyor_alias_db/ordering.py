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
    after: dict[torch.fx.Node, list[torch.fx.Node]] = {}
    last_writer: torch.fx.Node | None = None
    last_write: dict[LocId, tuple[int, torch.fx.Node]] = {}  # location -> (writer index, writer)
    waiting: dict[LocId, list[torch.fx.Node]] = {}  # location -> readers with no later writer yet
    waiting_barriers: list[torch.fx.Node] = []
    covered: set[torch.fx.Node] = set()
    writer_index = 0
    for node in nodes:
        if writer(node):
            edges = [] if last_writer is None else [last_writer]
            for loc in db.writes(node):
                for reader in waiting.pop(loc, ()):
                    if reader not in covered:
                        covered.add(reader)
                        edges.append(reader)
            edges.extend(n for n in waiting_barriers if n not in covered)
            covered.update(waiting_barriers)
            waiting_barriers = []
            writer_index += 1
            for loc in db.writes(node):
                last_write[loc] = (writer_index, node)
            last_writer = node
        elif barrier(node) or db.writes(node):
            edges = [] if last_writer is None else [last_writer]
            waiting_barriers.append(node)
        else:
            reads = db.reads(node)
            found = max((last_write[loc] for loc in reads if loc in last_write), default=None, key=lambda w: w[0])
            edges = [] if found is None else [found[1]]
            for loc in reads:
                waiting.setdefault(loc, []).append(node)
        if edges:
            after[node] = list(dict.fromkeys(edges))
    return after
