"""Graph rewrites that build fusion groups, keeping an ``AliasDb`` current.

Note [Merging in place]
~~~~~~~~~~~~~~~~~~~~~~~
Merging a node into a group moves its computation into the group's inner graph:
its inputs become group inputs (or inner values it already computes), and if
its result is used outside it becomes a new group output, read by a new
``getitem`` node that takes over the node's aliasing (``replace_with_new_value``
in PR 42141's terms). The inner copy keeps the node's facts, the group's
effects grow by the node's, and group outputs nobody reads any more are
dropped. Nothing else in the graph changes, so the analysis of every other node
stays valid: one merge costs O(number of the group's inputs and outputs plus
the nodes between the node and the group), never O(graph). Two groups become
one (``merge_groups``) by ungrouping the earlier one in place (``ungroup``:
its inner nodes return to the outer graph with their facts) and merging its
nodes one by one, last first, so each is next to the group when it moves.
"""

from __future__ import annotations

import operator
from typing import Protocol

import torch.fx

from conveyor_alias_db.group import FusedGroup, group_of
from conveyor_alias_db.locations import Effects, ValueFacts
from conveyor_alias_db.transfer import NodeFacts


class Analysis(Protocol):
    """What the rewrites use of ``AliasDb``: its public queries and update primitives."""

    def value_facts(self, value: torch.fx.Node) -> ValueFacts: ...
    def effects(self, node: torch.fx.Node) -> Effects: ...
    def facts(self, node: torch.fx.Node) -> NodeFacts: ...
    def derive(self, node: torch.fx.Node) -> NodeFacts: ...
    def record(self, node: torch.fx.Node, facts: NodeFacts) -> None: ...
    def forget(self, node: torch.fx.Node) -> None: ...
    def may_swap(self, node: torch.fx.Node, other: torch.fx.Node) -> bool: ...


def _check_mergeable(node: torch.fx.Node) -> None:
    if node.op not in ("call_function", "call_method"):
        raise ValueError(f"cannot put {node.op} node {node.name!r} into a fusion group")
    if group_of(node) is not None:
        raise ValueError(f"{node.name!r} is a fusion group itself; groups are not nested")


def _val(node: torch.fx.Node) -> object:
    return node.meta.get("val")


def create_group(db: Analysis, node: torch.fx.Node, name: str) -> torch.fx.Node:
    """Replace ``node`` by a group node running a copy of it; return the group node."""
    _check_mergeable(node)
    inner = torch.fx.Graph()
    mapping: dict[torch.fx.Node, torch.fx.Node] = {}
    for outer_input in node.all_input_nodes:
        placeholder = inner.placeholder(outer_input.name)
        placeholder.meta = dict(outer_input.meta)
        mapping[outer_input] = placeholder
        db.record(placeholder, NodeFacts(db.value_facts(outer_input)))
    copy = inner.node_copy(node, mapping.__getitem__)
    db.record(copy, db.facts(node))
    outputs = (copy,) if node.users else ()  # as in a merge: only values read outside
    out = inner.output(outputs)
    db.record(out, db.derive(out))

    target = FusedGroup(inner, name)
    graph = node.graph
    with graph.inserting_before(node):
        group = graph.call_function(target, tuple(node.all_input_nodes))
    db.record(group, NodeFacts(ValueFacts.of_items(tuple(db.value_facts(o) for o in outputs)), db.effects(node)))
    if "val" in node.meta:
        group.meta["val"] = tuple(_val(o) for o in outputs)
    if outputs:
        with graph.inserting_before(node):
            element = graph.call_function(operator.getitem, (group, 0))
        if "val" in node.meta:
            element.meta["val"] = _val(node)
        db.record(element, NodeFacts(db.value_facts(node)))
        node.replace_all_uses_with(element)
    graph.erase_node(node)
    db.forget(node)
    return group


def _passed_over(group: torch.fx.Node, node: torch.fx.Node) -> list[torch.fx.Node]:
    """The nodes between ``node`` and ``group`` (the group's own ``getitem`` nodes
    excepted: what ``node`` reads from them moves inside with it)."""
    between = []
    if node < group:
        current = node.next
        while current is not group:
            between.append(current)
            current = current.next
    else:
        current = group.next
        while current is not node:
            if not (current.target is operator.getitem and current.args[0] is group):
                between.append(current)
            current = current.next
    return between


def merge_into_group(db: Analysis, group: torch.fx.Node, node: torch.fx.Node) -> None:
    """Move ``node`` into ``group`` (Note [Merging in place]); ``ValueError`` if it
    cannot move next to the group without changing the result."""
    target = group_of(group)
    if target is None:
        raise ValueError(f"{group.name!r} is not a fusion group node")
    _check_mergeable(node)
    if node.graph is not group.graph:
        raise ValueError(f"{node.name!r} and {group.name!r} are in different graphs")
    if node.target is operator.getitem and node.args[0] is group:
        raise ValueError(f"{node.name!r} reads an output of {group.name!r}; merge its users instead")
    for other in _passed_over(group, node):
        if not db.may_swap(node, other):
            raise ValueError(f"cannot merge {node.name!r} into {group.name!r}: it cannot move past {other.name!r}")

    before = node < group
    inner = target.graph
    placeholders = target.placeholders()
    outputs = list(target.outputs())
    inputs = list(group.args)
    by_input = dict(zip(inputs, placeholders, strict=True))
    by_output = {gi: outputs[_element_index(gi)] for gi in group.users}
    last_placeholder = placeholders[-1] if placeholders else None

    def inner_value(outer: torch.fx.Node) -> torch.fx.Node:
        nonlocal last_placeholder
        if outer in by_output:
            return by_output[outer]
        if outer not in by_input:
            if last_placeholder is None:
                with inner.inserting_before(next(iter(inner.nodes))):
                    placeholder = inner.placeholder(outer.name)
            else:
                with inner.inserting_after(last_placeholder):
                    placeholder = inner.placeholder(outer.name)
            placeholder.meta = dict(outer.meta)
            db.record(placeholder, NodeFacts(db.value_facts(outer)))
            by_input[outer] = last_placeholder = placeholder
            inputs.append(outer)
        return by_input[outer]

    mapped = {n: inner_value(n) for n in node.all_input_nodes}
    if before:  # first in the body, right after the placeholders
        anchor = last_placeholder.next if last_placeholder is not None else next(iter(inner.nodes))
    else:
        anchor = target.output_node()
    with inner.inserting_before(anchor):
        copy = inner.node_copy(node, mapped.__getitem__)
    db.record(copy, db.facts(node))

    if before and node in by_input:
        # the group read node's result: its placeholder becomes the inner copy
        placeholder = by_input.pop(node)
        placeholder.replace_all_uses_with(copy)
        inner.erase_node(placeholder)
        db.forget(placeholder)
        inputs.remove(node)
    group.args = tuple(inputs)

    users = [u for u in node.users if u is not group]
    if users:
        with node.graph.inserting_after(group):
            element = node.graph.call_function(operator.getitem, (group, len(outputs)))
        if "val" in node.meta:
            element.meta["val"] = _val(node)
        outputs.append(copy)
        db.record(element, NodeFacts(db.value_facts(node)))
        node.replace_all_uses_with(element)
    node.graph.erase_node(node)
    db.forget(node)
    _drop_unread_outputs(db, group, outputs)

    out = target.output_node()
    out.args = (tuple(outputs),)
    db.record(out, db.derive(out))
    if "val" in group.meta:
        group.meta["val"] = tuple(_val(o) for o in outputs)
    value = ValueFacts.of_items(tuple(db.value_facts(o) for o in outputs))
    db.record(group, NodeFacts(value, db.effects(group) | db.effects(copy)))
    target.changed()


def _element_index(element: torch.fx.Node) -> int:
    """The output index a user of a group node reads (every user is ``getitem(group, i)``)."""
    index = element.args[1] if element.target is operator.getitem and len(element.args) == 2 else None
    if not isinstance(index, int):
        raise ValueError(f"{element.name!r} uses a fusion group other than by getitem(group, index)")
    return index


def _drop_unread_outputs(db: Analysis, group: torch.fx.Node, outputs: list[torch.fx.Node]) -> None:
    """Remove the group outputs no ``getitem`` reads any more and renumber the rest."""
    elements = {_element_index(gi): gi for gi in group.users}
    kept: list[torch.fx.Node] = []
    for index, value in enumerate(outputs):
        element = elements.get(index)
        if element is None or not element.users:
            if element is not None:
                group.graph.erase_node(element)
                db.forget(element)
            continue
        if element.args[1] != len(kept):
            element.args = (group, len(kept))
        kept.append(value)
    outputs[:] = kept


def ungroup(db: Analysis, group: torch.fx.Node) -> list[torch.fx.Node]:
    """Put the inner nodes of ``group`` back in the outer graph in its place, in
    their inner order, and erase the group node and its ``getitem`` nodes (each
    use of an output is a use of the node that computes it); return the new
    outer nodes. Each keeps its inner copy's facts, so nothing else changes."""
    target = group_of(group)
    if target is None:
        raise ValueError(f"{group.name!r} is not a fusion group node")
    graph = group.graph
    outer: dict[torch.fx.Node, torch.fx.Node] = dict(zip(target.placeholders(), group.args, strict=True))  # type: ignore[arg-type]
    made = []
    with graph.inserting_before(group):
        for inner in target.graph.nodes:
            if inner.op in ("placeholder", "output"):
                continue
            node = graph.node_copy(inner, outer.__getitem__)
            db.record(node, db.facts(inner))
            outer[inner] = node
            made.append(node)
    outputs = target.outputs()
    for element in list(group.users):
        element.replace_all_uses_with(outer[outputs[_element_index(element)]])
        graph.erase_node(element)
        db.forget(element)
    graph.erase_node(group)
    db.forget(group)
    for inner in target.graph.nodes:
        db.forget(inner)
    return made


def merge_groups(db: Analysis, group: torch.fx.Node, other: torch.fx.Node) -> None:
    """Move every inner node of the group ``other`` into ``group`` (Note [Merging
    in place], one node at a time); ``ValueError`` unless ``other`` and its
    ``getitem`` nodes sit right before ``group``."""
    if group_of(group) is None or group_of(other) is None:
        raise ValueError(f"{group.name!r} and {other.name!r} must both be fusion group nodes")
    block_end = other
    while block_end.next.target is operator.getitem and block_end.next.args[0] is other:
        block_end = block_end.next
    if block_end.next is not group:
        raise ValueError(f"group {other.name!r} does not sit right before {group.name!r}")
    for node in reversed(ungroup(db, other)):  # the last first: each is then next to the group
        merge_into_group(db, group, node)
