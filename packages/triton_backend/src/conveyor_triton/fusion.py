"""Fusion groups: which nodes become one kernel.

Note [Linear index]: every value inside a group is addressed by the linear
(row-major) index of its element in its own logical shape. A pointwise group
iterates over ``numel`` elements; a node may join when its operands from the
group sit at the same linear index (same shape up to size-1 dimensions), so a
view that keeps the row-major order (``view``, ``unsqueeze``, ``squeeze``) is
free inside a group. A *row* group also has a reduction over the trailing
``R`` elements of that order: its values are either ``full`` (linear index
``i``) or ``row`` (index ``i // R``, one per row), and a row value broadcast
along the trailing dimensions may feed a full node. Several reductions over
the same rows share one group (softmax, layer norm and their backwards).

Legality: joining a group never makes it depend on a step that depends on it
(no cycles in the step graph), and memory order is kept (Note [Write order]).

Groups over the same domain that a later node reads from both are merged
(Note [Group merging] in ``conveyor_triton.merge``).

Note [Absorbed producers]: a pointwise node with no operand inside any group
starts a group of its own; when its only user joins (or starts) another group,
it moves there, so a chain like ``g * w`` feeding one consumer is not a kernel
of its own. If it is smaller than its user (broadcast) and reads nothing of
the group, it is recomputed at each element of its user instead.

Reductions and scans start or join row groups (``conveyor_triton.fusion_rows``,
where Note [Permuted groups] lives).

Note [Write order]: a graph that still contains mutation (functionalize
disabled) runs each writing node as an aten call, and every pair of a writer
and a node that conflicts with it in memory (one writes what the other reads
or writes) keeps its program order in the step graph: a conflicting node
before the writer runs before it, one after runs after it. The fuser's
``AliasDb`` (``conveyor_triton.record``), updated in place by the merges made
so far, answers as the fuser reaches each node which earlier nodes it
conflicts with, as edges whose transitive closure orders every such pair
(``conveyor_alias_db.MemoryOrder``, Note [Memory order edges]); writers keep
their order among themselves, and views and aten calls count as conflicting
with every writer (a writer may change the metadata they read, which the
analysis does not model). A kernel may then hold nodes from both sides of a
write that does not touch their memory, and never one that does, because that
would be a cycle. Each merge is made in the analysis at once, and the analysis
may refuse one that would move work past work it conflicts with
(Note [Fusion in the AliasDb]).

The step graph (``conveyor_triton.steps``) keeps the dependencies, those edges
included, because a cycle can run through steps far from both ends, which no
question about the two ends answers; it answers the cycle questions in time proportional to the steps between the two ends
(Note [Step ranks]); the groups a node may join are found through indexes of
the values groups read and of the rows reducing groups reduce, never by a
scan of every group, so the pass is linear in the graph for graphs made of
repeated blocks (``benchmarks/fusion_scaling.py``).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Iterable, Sequence
from typing import cast

import torch
import torch.fx

from conveyor_triton.classify import ORDER_KEEPING_VIEWS, NodeClass
from conveyor_triton.domain import Kind, access_ok, broadcasts, row_broadcast_ok
from conveyor_triton.domain import numel as _numel
from conveyor_triton.domain import shape as _shape
from conveyor_triton.fusion_index import absorb_index
from conveyor_triton.fusion_rows import CANDIDATES, reduction, scan
from conveyor_triton.index_reads import INDEX_READS
from conveyor_triton.merge import merge
from conveyor_triton.ops import RULES, SHIFTED
from conveyor_triton.record import Working
from conveyor_triton.steps import Ancestors, Group, Step, StepGraph

__all__ = ["CANDIDATES", "Fuser", "Group", "Step"]


class Fuser:
    """Forms fusion groups over a decomposed graph, in one pass in graph order.

    :ivar working: the fuser's working copy of the graph and its ``AliasDb``,
        where each group is formed as it is decided (Note [Fusion in the AliasDb]).
    """

    def __init__(
        self,
        graph: torch.fx.Graph,
        classes: dict[torch.fx.Node, NodeClass],
        input_aliasing: Sequence[Sequence[torch.fx.Node]] | None = None,
        *,
        rebuild: bool = False,
    ) -> None:
        """:param input_aliasing: groups of placeholders that may alias (the others
        alias nothing); None: any input may alias any other.
        :param rebuild: analyse the working copy again after every merge instead of
            updating its analysis in place (for ``benchmarks/fusion_scaling.py``)."""
        self.classes = classes
        #: whether the graph writes memory (functionalize off)
        self.writes_memory = any(c.writes for c in classes.values())
        self.graph = StepGraph()
        self.step_of: dict[torch.fx.Node, int] = {}
        self.group_of: dict[torch.fx.Node, Group] = {}
        self.position: dict[torch.fx.Node, int] = {n: i for i, n in enumerate(graph.nodes)}
        self._readers: dict[torch.fx.Node, list[Group]] = {}  # value -> groups that read it (lazy: check reads)
        self._reducing: dict[tuple[object, ...], list[Group]] = {}  # Group.domain() -> reducing groups, by step
        self.working = Working(
            graph, input_aliasing, writer=self._writes, barrier=self._barrier, deps=self.graph.deps, rebuild=rebuild
        )
        self._after: dict[torch.fx.Node, list[torch.fx.Node]] = {}  # node -> earlier nodes it follows in memory
        for position, node in enumerate(graph.nodes):
            cls = classes.get(node)
            if node.op == "output":
                continue
            if node.op == "placeholder":
                self._new_step("input", node, position)
                continue
            self._after[node] = self.working.visit(node)
            if node.op != "call_function" or cast(NodeClass, cls).writes:
                self._new_step("aten", node, position)
            elif cast(NodeClass, cls).category == "pointwise":  # classes cover every call_function node
                self._pointwise(node, position)
            elif cast(NodeClass, cls).category == "reduction":
                reduction(self, node, position)
            elif cast(NodeClass, cls).category == "scan":
                scan(self, node, position)
            elif cast(NodeClass, cls).category == "view":
                self._view(node, position)
            else:
                self._new_step("aten", node, position)

    @property
    def steps(self) -> list[Step]:
        """Every step, by index."""
        return self.graph.steps

    def order(self) -> list[int]:
        """Steps in program order as far as data and memory order (Note [Write order]) allow."""
        return self.graph.order()

    def group_nodes(self) -> dict[int, torch.fx.Node]:
        """The group node in the working copy of each group step that has members."""
        return self.working.group_nodes()

    # -- memory order (Note [Write order]) ------------------------------------
    def _writes(self, node: torch.fx.Node) -> bool:
        cls = self.classes.get(node)
        return cls is not None and cls.writes

    def _barrier(self, node: torch.fx.Node) -> bool:
        cls = self.classes.get(node)
        return cls is None or cls.category not in ("pointwise", "reduction", "scan")  # views, aten calls, get_attr

    def _order(self, node: torch.fx.Node) -> set[int]:
        """Steps ``node`` must run after besides its data (Note [Write order]): those
        of the earlier nodes the ``AliasDb`` named when ``node`` was reached."""
        return {self.step_of[n] for n in self._after.get(node, ())}

    # -- steps and groups ------------------------------------------------------
    def _new_step(self, kind: str, node: torch.fx.Node, position: int, group: Group | None = None) -> int:
        deps = {self.step_of[a] for a in node.all_input_nodes} | self._order(node)
        step = Step(kind, node if group is None else None, group, position)  # type: ignore[arg-type]
        index = self.graph.add(step, deps)
        self.step_of[node] = index
        if group is None:
            self.working.place(node, index)
        return index

    def outside(self, node: torch.fx.Node, group: Group) -> set[int]:
        """The steps ``node`` depends on that are not ``group``."""
        outside = {self.step_of[a] for a in node.all_input_nodes if self.group_of.get(a) is not group}
        return outside | self._order(node)

    def join(self, node: torch.fx.Node, group: Group, kind: Kind, ancestors: Ancestors | None = None) -> bool:
        """Add ``node`` to ``group`` unless that would make a cycle (``ancestors``:
        those of ``outside(node, group)``, when the caller has them)."""
        if node.target in SHIFTED and set(node.all_input_nodes) & set(group.members):
            return False  # it reads its inputs at other indexes: from memory (Note [Cat in a group])
        outside = self.outside(node, group)
        if (ancestors or self.graph.ancestors(outside)).include(group.step):
            return False
        if not self.working.join(node, group.step):
            return False  # it would move past work it conflicts with in memory
        group.members[node] = kind
        self.read(group, [a for a in node.all_input_nodes if a not in group.members])
        self.graph.depend(group.step, outside)
        self.step_of[node] = group.step
        self.group_of[node] = group
        return True

    def new_group(self, node: torch.fx.Node, kind: Kind, position: int, numel: int) -> Group:
        group = Group(step=len(self.graph), numel=numel)
        self._new_step("group", node, position, group)
        self.working.create_group(node, group.step)
        group.members[node] = kind
        self.read(group, node.all_input_nodes)
        self.group_of[node] = group
        return group

    def read(self, group: Group, values: Iterable[torch.fx.Node]) -> None:
        """Record that ``group`` reads ``values``."""
        for value in values:
            if value not in group.reads:
                group.reads.add(value)
                bisect.insort(self._readers.setdefault(value, []), group, key=lambda g: g.step)

    def reducing(self, group: Group) -> None:
        """Record that ``group`` now has a reduction (its ``domain()`` is set once, for good)."""
        bisect.insort(self._reducing.setdefault(cast(tuple, group.domain()), []), group, key=lambda g: g.step)

    def reducing_groups(self, domain: tuple[object, ...]) -> list[Group]:
        """The groups reducing rows of ``domain`` (``Group.domain()``), by step."""
        return self._reducing.get(domain, [])

    def fold(self, other: Group, group: Group) -> bool:
        """Merge ``other`` into ``group`` in the working copy if its ``AliasDb``
        lets them meet (the caller checked the step graph); return whether it did."""
        return self.working.fold(group.step, other.step)

    def move(self, node: torch.fx.Node, group: Group) -> None:
        """Record that ``node`` now belongs to ``group``."""
        self.group_of[node] = group
        self.step_of[node] = group.step

    def _reading(self, node: torch.fx.Node) -> list[Group]:
        """The ``CANDIDATES`` most recent groups that read one of ``node``'s inputs, most recent first."""
        found: dict[Group, None] = {}
        for a in node.all_input_nodes:
            readers = self._readers.get(a, [])
            taken = 0
            for g in reversed(readers):
                if taken == CANDIDATES:
                    break
                if a in g.reads:  # else merged away or absorbed since
                    found[g] = None
                    taken += 1
        return sorted(found, key=lambda g: -g.step)[:CANDIDATES]

    def sharing(self, node: torch.fx.Node, shape: tuple[int, ...]) -> list[Group]:
        """Groups whose full values can have ``shape`` and that
        already read one of ``node``'s inputs (horizontal fusion: the read is
        shared), most recent first."""
        return [g for g in self._reading(node) if g.numel == math.prod(shape) and g.shape in (None, shape)]

    def access(
        self, operand: torch.fx.Node, group: Group, node: torch.fx.Node, kind: Kind, src_kind: Kind | None = None
    ) -> bool:
        """Whether ``node`` (of ``kind`` in ``group``) may read member ``operand``
        (of ``src_kind``, default its kind in ``group``) in place."""
        src, dst = _shape(operand), _shape(node)
        src_kind = src_kind or group.members[operand]
        if group.perm is None:
            return access_ok(src, src_kind, dst, kind, group.reduce or 1)
        if src_kind == kind:
            return src == dst
        return src_kind == "row" and row_broadcast_ok(src, dst, group.reduced)

    # -- one node of each category ------------------------------------------
    def _pointwise(self, node: torch.fx.Node, position: int) -> None:
        reads = [node.args[i] for i in RULES[node.target].reads if i < len(node.args)]
        operands = [a for a in reads if isinstance(a, torch.fx.Node)]
        loose = [a for a in dict.fromkeys(operands) if self.loose(a, node)]
        candidates: list[Group] = []
        for a in operands:
            g = self.group_of.get(a)
            if g is not None and g not in candidates and a not in loose:
                candidates.append(g)
        group = self._place(node, operands, candidates)
        if group is None:
            group = self.new_group(node, "full", position, _numel(node))
        for other in candidates:
            merge(self, other, group)
        self._absorb(node, group, loose)
        if node.target in INDEX_READS:
            absorb_index(self, node, group)

    def _place(self, node: torch.fx.Node, operands: list[torch.fx.Node], candidates: list[Group]) -> Group | None:
        """Join ``node`` to the first group that can take it: one holding an
        operand, then one sharing a read; return it (None: no group could)."""
        for group in sorted(candidates, key=lambda g: -g.step):
            inside = [a for a in operands if self.group_of.get(a) is group]
            any_full = any(group.members[a] == "full" for a in inside)
            if group.perm is not None:
                grows = _shape(node) == group.shape
            else:
                grows = group.rows is not None and _numel(node) == group.numel != group.rows
            kind: Kind = "full" if any_full or grows else "row"
            if kind == "full" and group.shape not in (None, _shape(node)):
                continue
            if _numel(node) != (group.numel if kind == "full" else group.rows):
                continue
            if all(self.access(a, group, node, kind) for a in inside) and self.join(node, group, kind):
                return group
        for group in self.sharing(node, _shape(node)):
            inside = [a for a in operands if self.group_of.get(a) is group]
            if group not in candidates and all(self.access(a, group, node, "full") for a in inside):
                if self.join(node, group, "full"):
                    return group
        beside = [g for g in self._reading(node) if g.rows == _numel(node) != g.numel]
        for group in beside:  # a per-row value next to a reduction reading the same input
            inside = [a for a in operands if self.group_of.get(a) is group]
            if all(self.access(a, group, node, "row") for a in inside) and self.join(node, group, "row"):
                return group
        return None

    def loose(self, operand: torch.fx.Node, user: torch.fx.Node) -> bool:
        """Whether ``operand`` is a pointwise node alone in its group, used only
        by ``user``: it can move into ``user``'s group (Note [Absorbed producers])."""
        group = self.group_of.get(operand)
        return (
            group is not None
            and list(group.members) == [operand]
            and group.reduce is None
            and operand.target in RULES
            and list(operand.users) == [user]
        )

    def _absorb(self, node: torch.fx.Node, group: Group, loose: list[torch.fx.Node]) -> None:
        """Move each loose operand of ``node`` into ``group`` where it fits."""
        kind = group.members[node]
        for a in loose:
            alone = self.group_of[a]
            if alone is group:
                continue
            at = None
            if _numel(a) == _numel(node) and self.access(a, group, node, kind, kind):
                a_kind: Kind = kind
            elif kind == "full" and group.rows is not None and _numel(a) == group.rows:
                a_kind = "row"
            elif broadcasts(_shape(a), _shape(node)) and not set(a.all_input_nodes) & set(group.members):
                a_kind, at = kind, _shape(node)  # recomputed at each element of node (its loads broadcast)
            else:
                continue
            if a_kind == "full" and group.shape not in (None, at or _shape(a)):
                continue
            if a.target in SHIFTED and set(a.all_input_nodes) & set(group.members):
                continue
            if at is None and not self.access(a, group, node, kind, a_kind):
                continue
            if self.graph.reaches(self.graph.deps(alone.step), group.step):
                continue
            if self.graph.users(alone.step) - {group.step}:
                continue  # a writer must run after it (Note [Write order])
            if not self.fold(alone, group):
                continue
            self.graph.contract(group.step, alone.step)
            alone.members.clear()
            alone.reads.clear()
            group.members[a] = a_kind
            if at is not None:
                group.evaluate_at[a] = at
            group.members = dict(sorted(group.members.items(), key=lambda m: self.position[m[0]]))
            self.read(group, a.all_input_nodes)
            self.move(a, group)

    def _view(self, node: torch.fx.Node, position: int) -> None:
        source = node.args[0]
        group = self.group_of.get(source) if isinstance(source, torch.fx.Node) else None
        if (
            group is not None
            and group.perm is None
            and node.target in ORDER_KEEPING_VIEWS
            and _numel(node) == _numel(source)  # type: ignore[arg-type]
            and node.meta["val"].dtype == source.meta["val"].dtype  # type: ignore[union-attr]
            and self.join(node, group, group.members[source])  # type: ignore[index]
        ):
            return
        self._new_step("view", node, position)
