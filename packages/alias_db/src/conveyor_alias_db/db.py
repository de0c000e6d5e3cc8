"""``AliasDb``: which values may share memory and which nodes read and write it.

Built once from an FX graph (``AliasDb.from_graph``), queried by fusers and
graph passes, and kept current while they rewrite the graph by the update
methods (``create_value``, ``copy_aliasing``, ``replace_with_new_value``,
``merge_into_group``, ...) instead of being rebuilt after each change, as
TorchScript's alias database is since pytorch/pytorch PR 42141. The model is
described in Note [Memory locations].
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator, Sequence

import torch.fx

from conveyor_alias_db import canonical, grouping
from conveyor_alias_db.debug import AliasDbMismatch, verify_updates_default
from conveyor_alias_db.group import FusedGroup, group_of
from conveyor_alias_db.locations import (
    NO_EFFECTS,
    NO_LOCS,
    WILDCARD,
    Effects,
    LocationAllocator,
    LocId,
    Locs,
    ValueFacts,
)
from conveyor_alias_db.transfer import NON_TENSOR, NodeFacts, may_hold_tensor, node_facts

InputAliasing = tuple[tuple[torch.fx.Node, ...], ...]


class AliasDb:
    """Alias and write analysis of one FX graph (and the inner graphs of its fusion groups).

    All queries and updates take ``torch.fx.Node``s; a node stands both for the
    operation and for the value it produces.
    """

    def __init__(self, graph: torch.fx.Graph, input_aliasing: InputAliasing | None, verify_updates: bool) -> None:
        self.graph = graph
        self.input_aliasing = input_aliasing
        self.verify_updates = verify_updates
        self._alloc = LocationAllocator()
        self._values: dict[torch.fx.Node, ValueFacts] = {}
        self._effects: dict[torch.fx.Node, Effects] = {}
        self._writers: dict[LocId, set[torch.fx.Node]] = {}
        self._escapes: dict[torch.fx.Node, Locs] = {}
        self._escape_count: Counter[LocId] = Counter()

    # ------------------------------------------------------------------ build

    @classmethod
    def from_graph(
        cls,
        graph: torch.fx.Graph,
        input_aliasing: Sequence[Sequence[torch.fx.Node]] | None = None,
        *,
        verify_updates: bool | None = None,
    ) -> AliasDb:
        """Analyse ``graph``.

        :param input_aliasing: groups of placeholder nodes; inputs in different
            groups never alias, two inputs of one group may. A tensor placeholder
            in no group aliases no other input. ``None`` (the default): nothing is
            known, every input may alias any other input, module state, and
            whatever an unknown call returns (all live in ``WILDCARD``).
        :param verify_updates: rebuild and compare after every update (see
            ``conveyor_alias_db.debug``); ``None`` reads ``CONVEYOR_ALIAS_DB_VERIFY``.
        """
        groups = None if input_aliasing is None else tuple(tuple(g) for g in input_aliasing)
        db = cls(graph, groups, verify_updates_default() if verify_updates is None else verify_updates)
        db._analyze(graph, db._input_bindings(graph, groups))
        return db

    def _input_bindings(self, graph: torch.fx.Graph, groups: InputAliasing | None) -> dict[torch.fx.Node, ValueFacts]:
        """Where each placeholder may live, from the caller's input aliasing groups."""
        inputs = [n for n in graph.nodes if n.op == "placeholder"]
        bindings: dict[torch.fx.Node, ValueFacts] = {}
        if groups is None:
            # nothing known: as in TorchScript, every input may be any memory the program can reach
            anywhere = ValueFacts(frozenset({WILDCARD}))
            return {n: anywhere if may_hold_tensor(n) else NON_TENSOR for n in inputs}
        for group in groups:
            shared = ValueFacts(frozenset({self._alloc.fresh()}))
            for node in group:
                if node.op != "placeholder" or node.graph is not graph:
                    raise ValueError(f"input_aliasing names {node.name!r}, which is not a placeholder of this graph")
                if node in bindings:
                    raise ValueError(f"input_aliasing puts placeholder {node.name!r} in two groups")
                bindings[node] = shared
        for node in inputs:
            if node not in bindings:
                bindings[node] = ValueFacts(frozenset({self._alloc.fresh()})) if may_hold_tensor(node) else NON_TENSOR
        return bindings

    def _analyze(self, graph: torch.fx.Graph, bindings: dict[torch.fx.Node, ValueFacts]) -> None:
        """Analyse every node of ``graph`` in order; placeholders take ``bindings``."""
        for node in graph.nodes:
            if node.op == "placeholder":
                self.record(node, NodeFacts(bindings[node]))
            else:
                self.record(node, self._facts_of(node))

    def _facts_of(self, node: torch.fx.Node) -> NodeFacts:
        """Analyse one non-placeholder node whose inputs are analysed (a group: its whole inner graph)."""
        group = group_of(node)
        if group is None:
            return node_facts(node, self.value_facts, self._alloc)
        inputs = group.placeholders()
        if len(inputs) != len(node.args) or node.kwargs:
            raise ValueError(f"group node {node.name!r} has {len(node.args)} inputs, its graph {len(inputs)}")
        bindings = {}
        for placeholder, outer in zip(inputs, node.args, strict=True):
            if not isinstance(outer, torch.fx.Node):
                raise ValueError(f"group node {node.name!r} takes a constant input {outer!r}")
            bindings[placeholder] = self.value_facts(outer)
        self._analyze(group.graph, bindings)
        value = ValueFacts.of_items(tuple(self.value_facts(v) for v in group.outputs()))
        return NodeFacts(value, self.group_effects(group))

    def group_effects(self, group: FusedGroup) -> Effects:
        """The union of what the inner nodes of ``group`` read and write."""
        effects = NO_EFFECTS
        for inner in group.graph.nodes:
            if inner.op not in ("placeholder", "output"):
                effects = effects | self.effects(inner)
        return effects

    # ------------------------------------------- records (update primitives)
    # The primitives the graph rewrites in ``conveyor_alias_db.grouping`` build on;
    # a pass that keeps the analysis current itself may use them too, but must
    # leave every node's facts as a rebuild would find them (``verify``).

    def facts(self, node: torch.fx.Node) -> NodeFacts:
        """Everything recorded about ``node``: where its value may live, what it
        reads and writes, and what it lets escape."""
        return NodeFacts(self.value_facts(node), self.effects(node), self._escapes.get(node, NO_LOCS))

    def derive(self, node: torch.fx.Node) -> NodeFacts:
        """The facts the analysis gives ``node`` now from the facts of its inputs
        (a group node: its whole inner graph analysed afresh); records nothing."""
        return self._facts_of(node)

    def record(self, node: torch.fx.Node, facts: NodeFacts) -> None:
        """Store the analysis of ``node``, replacing what was there."""
        self.forget(node)
        self._values[node] = facts.value
        self._set_effects(node, facts.effects)
        if facts.escapes:
            self._escapes[node] = facts.escapes
            self._escape_count.update(facts.escapes)

    def _set_effects(self, node: torch.fx.Node, effects: Effects) -> None:
        for loc in self._effects.get(node, NO_EFFECTS).writes:
            writers = self._writers[loc]
            writers.discard(node)
            if not writers:
                del self._writers[loc]
        if effects == NO_EFFECTS:
            self._effects.pop(node, None)
            return
        self._effects[node] = effects
        for loc in effects.writes:
            self._writers.setdefault(loc, set()).add(node)

    def forget(self, node: torch.fx.Node) -> None:
        """Drop everything recorded about ``node``."""
        self._values.pop(node, None)
        self._set_effects(node, NO_EFFECTS)
        escapes = self._escapes.pop(node, NO_LOCS)
        if escapes:
            self._escape_count.subtract(escapes)
            for loc in escapes:
                if self._escape_count[loc] <= 0:
                    del self._escape_count[loc]

    def nodes(self) -> Iterator[torch.fx.Node]:
        """Every analysed node: the graph's and those of its groups' inner graphs."""
        return iter(self._values)

    # -------------------------------------------------------------- queries

    def value_facts(self, value: torch.fx.Node) -> ValueFacts:
        """Where ``value`` may live (raises ``KeyError`` naming a node the analysis does not know)."""
        try:
            return self._values[value]
        except KeyError:
            raise KeyError(f"the alias analysis does not know node {value.name!r}") from None

    def effects(self, node: torch.fx.Node) -> Effects:
        """What ``node`` reads and writes (unexpanded; see ``reads`` and ``writes``)."""
        if node not in self._values:
            raise KeyError(f"the alias analysis does not know node {node.name!r}")
        return self._effects.get(node, NO_EFFECTS)

    def escaped(self) -> frozenset[LocId]:
        """The locations handed to code the analysis cannot see."""
        return frozenset(self._escape_count)

    def expand(self, locs: Iterable[LocId]) -> Locs:
        """``locs`` plus ``WILDCARD`` when one of them escaped (Note [Memory locations])."""
        locs = frozenset(locs)
        if WILDCARD not in locs and not locs.isdisjoint(self._escape_count):
            return locs | {WILDCARD}
        return locs

    def locations(self, value: torch.fx.Node) -> Locs:
        """The memory locations ``value`` may live in (with ``WILDCARD`` when it escaped)."""
        return self.expand(self.value_facts(value).locs)

    def may_alias(self, a: torch.fx.Node, b: torch.fx.Node) -> bool:
        """Whether the values of ``a`` and ``b`` may share memory."""
        return not self.locations(a).isdisjoint(self.locations(b))

    def writes(self, node: torch.fx.Node) -> Locs:
        """The memory locations ``node`` may write."""
        return self.expand(self.effects(node).writes)

    def reads(self, node: torch.fx.Node) -> Locs:
        """The memory locations ``node`` may read (everything it writes included)."""
        return self.expand(self.effects(node).reads)

    def writes_to(self, node: torch.fx.Node, value: torch.fx.Node) -> bool:
        """Whether ``node`` may write memory that ``value`` may live in."""
        return not self.writes(node).isdisjoint(self.locations(value))

    def has_writers(self, value: torch.fx.Node) -> bool:
        """Whether any node may write memory that ``value`` may live in."""
        locs = self.locations(value)
        if any(loc in self._writers for loc in locs):
            return True
        return WILDCARD in locs and any(loc in self._writers for loc in self._escape_count)

    def writers(self, value: torch.fx.Node) -> set[torch.fx.Node]:
        """The nodes that may write memory ``value`` may live in."""
        locs = self.locations(value)
        found: set[torch.fx.Node] = set()
        for loc in locs | (frozenset(self._escape_count) if WILDCARD in locs else NO_LOCS):
            found |= self._writers.get(loc, set())
        return found

    def conflicts(self, a: torch.fx.Node, b: torch.fx.Node) -> bool:
        """Whether swapping ``a`` and ``b`` may change what memory holds: one writes
        what the other reads or writes."""
        return not (self.writes(a).isdisjoint(self.reads(b)) and self.writes(b).isdisjoint(self.reads(a)))

    def can_move_before(self, node: torch.fx.Node, anchor: torch.fx.Node) -> bool:
        """Whether ``node`` alone can move to just before ``anchor`` without changing
        what the program computes: no node it passes over produces one of its
        inputs or uses its result, and none conflicts with it in memory."""
        return self._can_move(node, anchor, after=False)

    def can_move_after(self, node: torch.fx.Node, anchor: torch.fx.Node) -> bool:
        """Whether ``node`` alone can move to just after ``anchor`` (see ``can_move_before``)."""
        return self._can_move(node, anchor, after=True)

    def move_before(self, node: torch.fx.Node, anchor: torch.fx.Node) -> bool:
        """Move ``node`` to just before ``anchor`` if ``can_move_before`` allows it;
        return whether it moved. The analysis does not depend on the order of
        nodes, so it needs no update."""
        if not self.can_move_before(node, anchor):
            return False
        if node is not anchor:
            anchor.prepend(node)
        return True

    def move_after(self, node: torch.fx.Node, anchor: torch.fx.Node) -> bool:
        """Move ``node`` to just after ``anchor`` if ``can_move_after`` allows it; return whether it moved."""
        if not self.can_move_after(node, anchor):
            return False
        if node is not anchor:
            anchor.append(node)
        return True

    def _can_move(self, node: torch.fx.Node, anchor: torch.fx.Node, *, after: bool) -> bool:
        if node.graph is not anchor.graph:
            raise ValueError(f"{node.name!r} and {anchor.name!r} are in different graphs")
        if node is anchor:
            return True
        if node.op in ("placeholder", "output"):
            return False
        if (anchor.op == "placeholder" and not after) or (anchor.op == "output" and after):
            return False
        return all(self.may_swap(node, other) for other in _passed_over(node, anchor, after=after))

    def may_swap(self, node: torch.fx.Node, other: torch.fx.Node) -> bool:
        """Whether ``node`` and ``other``, neighbours in program order, may swap
        places: neither uses the other's result, ``other`` is no placeholder, and
        they do not conflict in memory."""
        if other in node.users or node in other.users or other.op == "placeholder":
            return False
        return not self.conflicts(node, other)

    # -------------------------------------------------------------- updates

    def create_value(self, node: torch.fx.Node) -> None:
        """Record ``node`` as a new value in fresh memory that reads and writes nothing
        (for nodes a pass inserts whose result is known to be new memory)."""
        self.record(node, NodeFacts(ValueFacts(frozenset({self._alloc.fresh()}))))
        self._after_update()

    def add_node(self, node: torch.fx.Node) -> None:
        """Analyse a node a pass inserted (its inputs must be analysed already)."""
        self.record(node, self._facts_of(node))
        self._after_update()

    def copy_aliasing(self, src: torch.fx.Node, dst: torch.fx.Node) -> None:
        """Let ``dst``'s value live exactly where ``src``'s may (what ``dst`` reads
        and writes is unchanged)."""
        self._values[dst] = self.value_facts(src)
        self._after_update()

    def replace_with_new_value(self, old: torch.fx.Node, new: torch.fx.Node) -> None:
        """Make every use of ``old`` a use of ``new``, which takes over ``old``'s
        aliasing, and erase ``old`` from the graph and the analysis (its
        computation, writes included, must now happen elsewhere, e.g. in ``new``'s
        fusion group; what ``new`` reads and writes is unchanged)."""
        old.replace_all_uses_with(new)
        self._values[new] = self.value_facts(old)
        old.graph.erase_node(old)
        self.forget(old)
        self._after_update()

    def erase_node(self, node: torch.fx.Node) -> None:
        """Remove ``node`` (which must have no users) from its graph and from the analysis."""
        group = group_of(node)
        node.graph.erase_node(node)
        self.forget(node)
        if group is not None:
            for inner in group.graph.nodes:
                self.forget(inner)
        self._after_update()

    def create_group(self, node: torch.fx.Node, name: str = "fused_group") -> torch.fx.Node:
        """Wrap ``node`` into a new fusion group node in its place; returns the group node."""
        group = grouping.create_group(self, node, name)
        self._after_update()
        return group

    def merge_into_group(self, group: torch.fx.Node, node: torch.fx.Node) -> None:
        """Move ``node`` into the fusion group ``group`` (see ``conveyor_alias_db.grouping``).
        Raises ``ValueError`` when ``node`` cannot move next to the group."""
        grouping.merge_into_group(self, group, node)
        self._after_update()

    def merge_groups(self, group: torch.fx.Node, other: torch.fx.Node) -> None:
        """Move the inner nodes of the fusion group ``other``, which (with its
        ``getitem`` nodes) sits right before ``group``, into ``group``; ``other`` is
        erased (see ``conveyor_alias_db.grouping.merge_groups``)."""
        grouping.merge_groups(self, group, other)
        self._after_update()

    def ungroup(self, group: torch.fx.Node) -> list[torch.fx.Node]:
        """Undo the fusion group ``group``: its inner nodes return to the outer
        graph in its place (see ``conveyor_alias_db.grouping.ungroup``); returns them."""
        made = grouping.ungroup(self, group)
        self._after_update()
        return made

    def effects_conflict(self, a: Effects, b: Effects) -> bool:
        """Whether work with effects ``a`` and work with effects ``b`` may not swap
        places: one writes what the other reads (``conflicts`` for sets of nodes,
        with their effects joined by ``|``)."""
        return not (
            self.expand(a.writes).isdisjoint(self.expand(b.reads))
            and self.expand(b.writes).isdisjoint(self.expand(a.reads))
        )

    def verify(self) -> None:
        """Rebuild the analysis from scratch and raise ``AliasDbMismatch`` on any difference."""
        rebuilt = AliasDb.from_graph(self.graph, self.input_aliasing, verify_updates=False)
        differences = canonical.differences(canonical.snapshot(self), canonical.snapshot(rebuilt))
        if differences:
            raise AliasDbMismatch("alias analysis updated in place differs from a rebuild:\n" + "\n".join(differences))

    def _after_update(self) -> None:
        if self.verify_updates:
            self.verify()


def _passed_over(node: torch.fx.Node, anchor: torch.fx.Node, *, after: bool) -> Iterator[torch.fx.Node]:
    """The nodes ``node`` passes over when it moves just before (or after) ``anchor``."""
    if node < anchor:
        stop = anchor.next if after else anchor
        current = node.next
        while current is not stop:
            yield current
            current = current.next
    else:
        stop = anchor if after else anchor.prev
        current = node.prev
        while current is not stop:
            yield current
            current = current.prev
