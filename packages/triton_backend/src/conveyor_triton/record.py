"""The fuser's working copy of the graph and its ``AliasDb``: the alias model of
the fusion pass.

Note [Fusion in the AliasDb]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~
The fuser copies the graph it lowers once and analyses the copy with
``conveyor_alias_db.AliasDb``. While it forms groups it asks that analysis
which nodes must keep their order in memory (``memory_order``, Note [Write
order] in ``conveyor_triton.fusion``); it keeps no alias facts of its own. Once
the groups are decided, ``record`` lays the copy out in the order the program
will run its steps and forms every group there with ``AliasDb.create_group``
and ``AliasDb.merge_into_group``, the in-place update of pytorch/pytorch PR
42141: each merge costs the size of the group's inputs and outputs, never a
rebuild. The analysis then describes the fused program (each group node reads
and writes what its members do). In that layout a group's members follow each
other, so no merge moves a node past another: whether a node may join a group
across other steps is the step graph's question (Note [Step ranks] in
``conveyor_triton.steps``), asked with the memory order this analysis gave.
The tests check that the analysis after the merges equals a rebuild
(``AliasDb.verify``) and that the fused copy, run as an FX graph, computes what
the original does, writes included.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence

import torch.fx
from conveyor_alias_db import AliasDb, memory_order

from conveyor_triton.steps import Step


class Working:
    """A copy of a graph, the ``AliasDb`` of the copy, and the map between the two.

    :ivar graph: the copy (after ``record``: in step order, one group node per fusion group).
    :ivar alias_db: its analysis, kept current by every group update.
    :ivar copy_of: original node -> its copy (a node merged into a group: the copy that was merged).
    """

    def __init__(self, graph: torch.fx.Graph, input_aliasing: Sequence[Sequence[torch.fx.Node]] | None) -> None:
        self.graph = torch.fx.Graph()
        self.copy_of: dict[torch.fx.Node, torch.fx.Node] = {}
        for node in graph.nodes:
            self.copy_of[node] = self.graph.node_copy(node, self.copy_of.__getitem__)
        self._original = {c: n for n, c in self.copy_of.items()}
        groups = None if input_aliasing is None else [[self.copy_of[p] for p in g] for g in input_aliasing]
        self.alias_db = AliasDb.from_graph(self.graph, groups)

    def memory_order(
        self,
        nodes: Iterable[torch.fx.Node],
        *,
        writer: Callable[[torch.fx.Node], bool],
        barrier: Callable[[torch.fx.Node], bool],
    ) -> dict[torch.fx.Node, list[torch.fx.Node]]:
        """``conveyor_alias_db.memory_order`` over the original ``nodes`` (in program order)."""
        original = self._original
        after = memory_order(
            self.alias_db,
            [self.copy_of[n] for n in nodes],
            writer=lambda c: writer(original[c]),
            barrier=lambda c: barrier(original[c]),
        )
        return {original[c]: [original[d] for d in earlier] for c, earlier in after.items()}

    def record(self, steps: Sequence[Step], order: Sequence[int], *, rebuild: bool = False) -> dict[int, torch.fx.Node]:
        """Lay the copy out in ``order`` (a topological order of ``steps``) and form
        each group step's group there (Note [Fusion in the AliasDb]); return the
        group node of each group step.

        :param rebuild: analyse the whole copy again after every group update
            instead of updating the analysis in place (what PR 42141 avoids; for
            ``benchmarks/fusion_scaling.py``).
        """
        end = self.graph.output_node()
        layout: list[tuple[int, list[torch.fx.Node]]] = []
        for index in order:
            step = steps[index]
            if step.kind == "input":
                continue
            if step.group is None:
                members = [step.node] if step.node is not None else []
            else:
                members = list(step.group.members)
            copies = [self.copy_of[m] for m in members]
            for copy in copies:
                end.prepend(copy)
            if step.group is not None and copies:
                layout.append((index, copies))
        group_nodes = {}
        for index, copies in layout:
            group = self.alias_db.create_group(copies[0], name=f"group{index}")
            self._updated(rebuild)
            for copy in copies[1:]:
                self.alias_db.merge_into_group(group, copy)
                self._updated(rebuild)
            group_nodes[index] = group
        return group_nodes

    def _updated(self, rebuild: bool) -> None:
        if rebuild:
            db = self.alias_db
            self.alias_db = AliasDb.from_graph(self.graph, db.input_aliasing, verify_updates=db.verify_updates)
