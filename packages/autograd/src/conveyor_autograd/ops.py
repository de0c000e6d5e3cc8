"""What the min-cut partitioner may recompute, from op tags and schemas.

Recomputing in the backward is worth it only for ops that are cheap and that a
fusing backend folds into their consumers: pointwise ops, views, factories and
a few cheap reductions. Random ops are never recomputed (the backward must
use the forward's mask), nor are matmuls, convolutions, attention or
normalization kernels (not in the list), nor reductions whose output is much
smaller than their input (saving the small result is cheaper).
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx
from conveyor.stage_api import is_effectful, is_random, is_view, op_facts

__all__ = ["is_effectful", "is_random", "is_recomputable", "is_view", "size_in_bytes"]

aten = torch.ops.aten

_CHEAP = frozenset(
    {
        aten.sum,
        aten.mean,
        aten.amax,
        aten.clone,
        aten._to_copy,
        aten.full,
        aten.full_like,
        aten.zeros,
        aten.zeros_like,
        aten.ones,
        aten.ones_like,
        aten.empty,
        aten.empty_like,
        aten.new_zeros,
        aten.scalar_tensor,
        aten.arange,
        aten.reshape,
        aten._unsafe_view,
        aten.sum_to_size,
        aten.threshold_backward,
        aten.gelu_backward,
        aten.sigmoid_backward,
        aten.tanh_backward,
        aten.silu_backward,
    }
)


def _packet(node: torch.fx.Node) -> Any:
    target = node.target
    return target.overloadpacket if isinstance(target, torch._ops.OpOverload) else None


def size_in_bytes(node: torch.fx.Node) -> int:
    """Bytes of the node's value (a tensor), 1 for a symbol, 0 otherwise."""
    val = node.meta.get("val")
    if isinstance(val, torch.Tensor):
        numel = val.numel()
        if not isinstance(numel, int):  # symbolic: its hint
            numel = numel.node.hint if numel.node.has_hint() else 4096
        return int(numel) * val.element_size()
    if isinstance(val, (torch.SymInt, int)):
        return 1
    return 0


def is_recomputable(node: torch.fx.Node) -> bool:
    """Cheap enough to compute twice; never a random op (nor one that writes,
    swaps storage or has an effect: ``conveyor.analysis.schema``'s ``recomputable``)."""
    if node.op != "call_function":
        return False
    if node.target is operator.getitem:
        return True
    target = node.target
    if not isinstance(target, torch._ops.OpOverload) or not op_facts(target).recomputable:
        return False
    if torch.Tag.pointwise in target.tags or is_view(node):
        return True
    if _packet(node) not in _CHEAP:
        return False
    # a reduction to something much smaller: save its result instead
    inputs = sum(size_in_bytes(a) for a in node.all_input_nodes)
    return size_in_bytes(node) * 4 >= inputs
