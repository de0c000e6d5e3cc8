"""The fuser's working copy of the graph and its ``AliasDb``: the alias model of
the fusion pass, updated in place at every merge.

Note [Fusion in the AliasDb]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~
The fuser copies the graph it lowers once and analyses the copy with
``conveyor_alias_db.AliasDb``. It visits the nodes in program order and asks
that analysis, as it reaches each node, which earlier nodes the node must
follow in memory (``MemoryOrder``, Note [Write order] in
``conveyor_triton.fusion``); it keeps no alias facts of its own. Every decision
is made in the copy at once, the in-place update of pytorch/pytorch PR 42141: a
new group is ``AliasDb.create_group``, a node joining one is
``merge_into_group``, two groups becoming one (Note [Group merging],
Note [Absorbed producers]) is ``merge_groups``. Each costs the size of the
group's inputs and outputs and the nodes it moves past, never a rebuild, and
afterwards the analysis describes the program fused so far (a group node reads
and writes what its members do) as a rebuild would (``AliasDb.verify``).

A merge in the copy moves work next to a group, so the analysis answers
whether a node may join: the group and the steps that depend on it move down
to the node, the work they pass must not conflict with them in memory
(``AliasDb.effects_conflict``), and the node then moves into the group
(``gather``). The step graph (Note [Step ranks] in ``conveyor_triton.steps``)
answers first what the analysis cannot: whether the merge would make a cycle
through steps that are not next to each other, and the order of views and aten
calls against writes to memory they do not read (a write may change their
metadata, which the analysis does not model). The copy is always laid out in
an order the step graph allows, the steps decided so far first, then the nodes
not yet reached in program order; the move for a merge only reorders steps
between the two ends, which the step graph has checked.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence

import torch.fx
from conveyor_alias_db import AliasDb, MemoryOrder
from conveyor_alias_db.locations import NO_EFFECTS, Effects

Deps = Callable[[int], frozenset[int]]


class Working:
    """A copy of a graph, the ``AliasDb`` of the copy, and the map between the two.

    :ivar graph: the copy: the steps decided so far (one group node per fusion
        group), then the nodes not reached yet.
    :ivar alias_db: its analysis, updated in place by every merge.
    :ivar copy_of: original node -> its copy (a node merged into a group: the copy that was merged).
    """

    def __init__(
        self,
        graph: torch.fx.Graph,
        input_aliasing: Sequence[Sequence[torch.fx.Node]] | None,
        *,
        writer: Callable[[torch.fx.Node], bool],
        barrier: Callable[[torch.fx.Node], bool],
        deps: Deps,
        rebuild: bool = False,
    ) -> None:
        """:param writer: and ``barrier``: over original nodes, as ``conveyor_alias_db.memory_order`` takes them.
        :param deps: the steps a step depends on (the step graph's, read at each merge).
        :param rebuild: analyse the whole copy again after every update instead of
            updating the analysis in place (what PR 42141 avoids; for
            ``benchmarks/fusion_scaling.py``)."""
        self.graph = torch.fx.Graph()
        self.copy_of: dict[torch.fx.Node, torch.fx.Node] = {}
        for node in graph.nodes:
            self.copy_of[node] = self.graph.node_copy(node, self.copy_of.__getitem__)
        original = self._original = {c: n for n, c in self.copy_of.items()}
        groups = None if input_aliasing is None else [[self.copy_of[p] for p in g] for g in input_aliasing]
        self.alias_db = AliasDb.from_graph(self.graph, groups)
        self._memory = MemoryOrder(  # the analysis updated in place (with ``rebuild``: the first one)
            self.alias_db, writer=lambda c: writer(original[c]), barrier=lambda c: barrier(original[c])
        )
        self._deps = deps
        self._rebuild = rebuild
        self._step_at: dict[torch.fx.Node, int] = {}  # node of the copy -> its step
        self._group_node: dict[int, torch.fx.Node] = {}  # group step -> its group node

    # -- visiting and deciding ----------------------------------------------
    def visit(self, node: torch.fx.Node) -> list[torch.fx.Node]:
        """Reach ``node`` (every node but placeholders and the output, in program
        order): the earlier nodes it must follow in memory (Note [Write order])."""
        return [self._original[c] for c in self._memory.visit(self.copy_of[node])]

    def place(self, node: torch.fx.Node, step: int) -> None:
        """``node`` (the last one reached) runs alone as ``step``."""
        self._step_at[self.copy_of[node]] = step

    def create_group(self, node: torch.fx.Node, step: int) -> None:
        """``node`` (the last one reached) starts the group of ``step``."""
        self._group_node[step] = self.alias_db.create_group(self.copy_of[node], name=f"group{step}")
        self._updated(step)

    def join(self, node: torch.fx.Node, step: int) -> bool:
        """Merge ``node`` (the last one reached) into the group of ``step`` if the
        analysis lets it move there (Note [Fusion in the AliasDb]); return whether it did."""
        copy = self.copy_of[node]
        if not self._gather(self._group_node[step], [copy]):
            return False
        self.alias_db.merge_into_group(self._group_node[step], copy)
        self._updated(step)
        return True

    def fold(self, keep: int, gone: int) -> bool:
        """Merge the group of step ``gone`` into that of step ``keep`` (which
        depends on it) if the analysis lets them meet; return whether it did."""
        group, other = self._group_node[keep], self._group_node.pop(gone)
        if not self._gather(other, _block(group)):
            self._group_node[gone] = other
            return False
        self.alias_db.merge_groups(group, other)
        self._updated(keep)
        return True

    def group_nodes(self) -> dict[int, torch.fx.Node]:
        """The group node of each group step that still has members."""
        return dict(self._group_node)

    # -- moving work next to a group -------------------------------------------
    def _gather(self, early: torch.fx.Node, late: list[torch.fx.Node]) -> bool:
        """Move the block of group node ``early`` down to just before ``late`` (a
        group block or the node just reached), and the steps between that depend
        on it to just after ``late``; False, moving nothing, where that would move
        work past work it conflicts with in memory, or past a use."""
        block = _block(early)
        steps = {self._step_at[early]}
        moving: list[torch.fx.Node] = []
        effects = self.alias_db.effects(early)
        current = block[-1].next
        while current is not late[0]:
            if current.op == "output":
                raise AssertionError(f"{early.name} does not come before {late[0].name} in the working copy")
            step = self._step_at[current]
            if step in steps or not steps.isdisjoint(self._deps(step)):
                steps.add(step)
                moving.append(current)
                effects = effects | self.alias_db.effects(current)
            elif self.alias_db.effects_conflict(effects, self.alias_db.effects(current)):
                return False
            current = current.next
        if not self._may_follow(moving, late):
            return False
        for node in block:
            late[0].prepend(node)
        end = late[-1]
        for node in moving:
            end.append(node)
            end = node
        return True

    def _may_follow(self, moving: list[torch.fx.Node], late: list[torch.fx.Node]) -> bool:
        """Whether the nodes ``moving`` may move down past the nodes ``late``."""
        if not moving:
            return True
        effects: Effects = NO_EFFECTS
        for node in moving:
            effects = effects | self.alias_db.effects(node)
        moved = set(moving)
        for node in late:
            if not moved.isdisjoint(node.all_input_nodes):
                return False
            if self.alias_db.effects_conflict(effects, self.alias_db.effects(node)):
                return False
        return True

    def _updated(self, step: int) -> None:
        group = self._group_node[step]
        self._step_at[group] = step
        for element in group.users:
            self._step_at[element] = step
        if self._rebuild:
            db = self.alias_db
            self.alias_db = AliasDb.from_graph(self.graph, db.input_aliasing, verify_updates=db.verify_updates)


def _block(group: torch.fx.Node) -> list[torch.fx.Node]:
    """A group node and the ``getitem`` nodes right after it that read it."""
    block = [group]
    while block[-1].next.target is operator.getitem and block[-1].next.args[0] is group:
        block.append(block[-1].next)
    return block
