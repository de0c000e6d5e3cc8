"""Writes through a view of another dtype, under grad: run eagerly.

Note [Writes through a dtype view]: ``x.view(torch.int64).add_(1)`` (or a
``view(torch.float64)`` of a complex ``x``) writes ``x``'s bits behind
autograd's back: in eager ``x`` keeps its autograd node, and a later ``x * y``
sends gradient to ``x``'s history as if the write were the identity.
Functionalized, ``x``'s new value is ``view(int_value, float64)``, which
autograd cannot differentiate, so the history was cut and the gradient
silently lost (found by the random-program fuzzer; AOTAutograd, which
differentiates before it functionalizes, is right). Such a write, in a
program compiled with grad while an input requires grad, runs the captured
aten graph eagerly, with a warning.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.fx
from conveyor.stage_api import is_view, written_positions

_VIEW_DTYPE = torch.ops.aten.view.dtype

REASON = (
    "it writes through a view of another dtype of a tensor that may require grad, a write autograd does not "
    "see in eager (Note [Writes through a dtype view])"
)


def writes_through_dtype_view(graph: torch.fx.GraphModule, inputs: Sequence[Any], grad_enabled: bool) -> bool:
    """Whether ``graph`` writes through a dtype view while gradients may flow
    (Note [Writes through a dtype view])."""
    if not grad_enabled or not any(isinstance(t, torch.Tensor) and t.requires_grad for t in inputs):
        return False
    nodes = graph.graph.nodes
    if not any(n.op == "call_function" and n.target is _VIEW_DTYPE for n in nodes):
        return False
    for node in nodes:
        if node.op != "call_function":
            continue
        for pos, name in written_positions(node):
            arg = node.args[pos] if pos < len(node.args) else node.kwargs.get(name)
            if _through_dtype_view(arg):
                return True
    return False


def _through_dtype_view(node: Any) -> bool:
    """A dtype view of a differentiable tensor is on ``node``'s chain of views."""
    while isinstance(node, torch.fx.Node) and node.op == "call_function" and is_view(node) and node.args:
        source = node.args[0]
        if node.target is _VIEW_DTYPE and _differentiable(source) and _dtype(source) != _dtype(node):
            return True
        node = source
    return False


def _dtype(node: Any) -> Any:
    value = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    return value.dtype if isinstance(value, torch.Tensor) else None


def _differentiable(node: Any) -> bool:
    dtype = _dtype(node)
    return dtype is not None and (dtype.is_floating_point or dtype.is_complex)
