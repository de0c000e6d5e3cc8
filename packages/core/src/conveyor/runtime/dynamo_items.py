"""Scalars a dynamo graph reads with ``.item()``, specialized on their values.

Note [Scalars read with item()]: under ``dynamic=True`` dynamo passes Python
floats (``LayerNorm``'s ``eps``) as 0-d tensor inputs that the graph reads
with ``.item()``, which a fake trace cannot follow. We specialize on their
values: the ``item`` node becomes a constant, and the value is part of the
run-time key, so another value compiles again.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx


def read_with_item(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> tuple[int, ...]:
    """Positions of 0-d tensor inputs the graph reads with ``.item()``
    (Note [Scalars read with item()])."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    return tuple(
        i
        for i, (node, x) in enumerate(zip(placeholders, example_inputs, strict=False))
        if isinstance(x, torch.Tensor)
        and x.dim() == 0
        and any(u.op == "call_method" and u.target == "item" for u in node.users)
    )


def item_values(flat: Sequence[Any], positions: Sequence[int]) -> dict[int, Any]:
    """The values a call's inputs at ``positions`` hold, by position."""
    return {i: flat[i].item() for i in positions}


def with_constant_items(gm: torch.fx.GraphModule, items: dict[int, Any]) -> torch.fx.GraphModule:
    """A copy of ``gm``'s graph in which ``.item()`` of the inputs at
    ``items`` is the given constant, over ``gm``'s own attributes: the
    parameters and buffers dynamo's graph holds are the caller's tensors,
    which the program writes (an optimizer step whose learning rate dynamo
    made a tensor input; a deep copy made the step update copies)."""
    if not items:
        return gm
    gm = torch.fx.GraphModule(gm, copy.deepcopy(gm.graph), class_name=type(gm).__name__)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for i, value in items.items():
        for item in [u for u in placeholders[i].users if u.op == "call_method" and u.target == "item"]:

            def constant(n: torch.fx.Node, item: torch.fx.Node = item, value: Any = value) -> Any:
                return value if n is item else n

            for user in list(item.users):
                user.args = torch.fx.node.map_arg(user.args, constant)
                user.kwargs = torch.fx.node.map_arg(user.kwargs, constant)
            gm.graph.erase_node(item)
    gm.recompile()
    return gm
