"""What one FX node does to memory, given what its inputs may alias.

``node_facts`` is the transfer function of the analysis: from the facts of a
node's inputs it gives the facts of its result, the memory it reads and writes,
and the locations it lets escape to code the analysis cannot see (see
Note [Memory locations]). Placeholders and fusion groups are handled by the
builder, which knows the calling context.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree
from conveyor.stage_api import OpAliasing, op_aliasing, op_facts

from conveyor_alias_db.locations import (
    NO_EFFECTS,
    NO_LOCS,
    RNG,
    WILDCARD,
    Effects,
    LocationAllocator,
    Locs,
    ValueFacts,
)

_MISSING = object()
NON_TENSOR = ValueFacts(NO_LOCS)


@dataclass(frozen=True)
class NodeFacts:
    """The analysis of one node.

    :ivar value: where its result may live.
    :ivar effects: what it reads and writes.
    :ivar escapes: locations it hands to code the analysis cannot see.
    """

    value: ValueFacts
    effects: Effects = NO_EFFECTS
    escapes: Locs = NO_LOCS


def may_hold_tensor(node: torch.fx.Node) -> bool:
    """Whether ``node``'s result may be or contain a tensor (``True`` when the graph
    carries no ``meta["val"]`` for it)."""
    val = node.meta.get("val", _MISSING)
    if val is _MISSING:
        return True
    return any(isinstance(leaf, torch.Tensor) for leaf in pytree.tree_leaves(val))


def _arg_locs(arg: Any, value_of: Callable[[torch.fx.Node], ValueFacts]) -> Locs:
    """Every location the FX nodes inside ``arg`` (a node, a list of nodes, ...) may live in."""
    found: list[Locs] = []

    def visit(node: torch.fx.Node) -> torch.fx.Node:
        found.append(value_of(node).locs)
        return node

    torch.fx.node.map_arg(arg, visit)
    return frozenset().union(*found)


def _bound_args(node: torch.fx.Node, aliasing: OpAliasing) -> list[Any]:
    """The value passed for each schema argument, positionally or by keyword."""
    bound = []
    for i, arg in enumerate(aliasing.args):
        if i < len(node.args):
            bound.append(node.args[i])
        else:
            bound.append(node.kwargs.get(arg.name))
    return bound


def _op_facts(node: torch.fx.Node, op: torch._ops.OpOverload, value_of, alloc: LocationAllocator) -> NodeFacts:
    aliasing = op_aliasing(op)
    sets: dict[str, Locs] = {}
    reads: Locs = NO_LOCS
    writes: Locs = NO_LOCS
    for arg, value in zip(aliasing.args, _bound_args(node, aliasing), strict=True):
        locs = _arg_locs(value, value_of)
        reads |= locs
        for name in arg.alias_sets:
            sets[name] = sets.get(name, NO_LOCS) | locs
        if arg.is_write:
            writes |= locs
    if aliasing.random:
        reads |= {RNG}
        writes |= {RNG}
    known = aliasing.arg_sets()
    items = []
    for ret in aliasing.returns:
        if not ret.holds_tensors:
            items.append(NO_LOCS)
        elif not ret.alias_sets:
            items.append(frozenset({alloc.fresh()}))
        else:
            locs = frozenset().union(*(sets.get(name, NO_LOCS) for name in ret.alias_sets))
            if ret.alias_sets - known:
                locs |= {WILDCARD}
            items.append(locs)
    if len(items) == 1:
        value = ValueFacts(items[0])
    else:
        value = ValueFacts.of_items(tuple(ValueFacts(i) for i in items))
    return NodeFacts(value, Effects(reads, writes))


def _wildcard_facts(node: torch.fx.Node, value_of) -> NodeFacts:
    """An unknown call: it may read, write and return any memory it can reach."""
    locs = _arg_locs((node.args, node.kwargs), value_of)
    if not locs and not may_hold_tensor(node):
        return NodeFacts(NON_TENSOR)  # arithmetic on sizes and other non-tensor values
    reached = locs | {WILDCARD}
    return NodeFacts(ValueFacts(frozenset({WILDCARD})), Effects(reached, reached), locs)


def node_facts(
    node: torch.fx.Node, value_of: Callable[[torch.fx.Node], ValueFacts], alloc: LocationAllocator
) -> NodeFacts:
    """The analysis of a ``call_function``, ``call_method``, ``call_module``,
    ``get_attr`` or ``output`` node (not a placeholder, not a fusion group)."""
    if node.op == "output":
        return NodeFacts(NON_TENSOR, Effects(_arg_locs(node.args, value_of)))
    if node.op == "get_attr":
        # module state: code the analysis cannot see may reach it through the module
        return NodeFacts(ValueFacts(frozenset({WILDCARD})) if may_hold_tensor(node) else NON_TENSOR)
    target = node.target
    if node.op == "call_function" and target is operator.getitem:
        container, index = node.args
        if not isinstance(container, torch.fx.Node):
            return _wildcard_facts(node, value_of)
        return NodeFacts(value_of(container).item(index))
    if node.op == "call_function" and isinstance(target, torch._ops.OpOverload) and not op_facts(target).storage_swap:
        return _op_facts(node, target, value_of, alloc)
    return _wildcard_facts(node, value_of)
