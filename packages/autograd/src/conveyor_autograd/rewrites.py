"""Functional ops without an autograd formula, rewritten for the joint trace.

Functionalization turns ``dst.copy_(src)`` (and ``x[i] = y``) into the
functional ``aten.copy(dst, src)``, which autograd cannot differentiate
("derivative for aten::copy is not implemented"): AOTAutograd never meets it
because it runs autograd above functionalization. Here autograd runs on the
functional graph, so before the joint trace each ``copy`` becomes the
equivalent differentiable expression: ``src`` converted to ``dst``'s dtype and
device, broadcast to its shape, materialized (contiguous). Its gradient flows to ``src``
only, as ``copy_``'s does.
"""

from __future__ import annotations

import torch
import torch.fx

aten = torch.ops.aten


def copy_differentiable(dst: torch.Tensor, src: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    """``aten.copy(dst, src)`` with a gradient for ``src``. Without one to
    give, it is ``aten.copy`` itself; with one, the result is contiguous
    (``aten.copy`` keeps ``dst``'s strides)."""
    if not src.requires_grad:
        return aten.copy.default(dst.detach(), src, non_blocking)
    moved = src.to(dtype=dst.dtype, device=dst.device).expand(dst.shape)
    return moved.clone(memory_format=torch.contiguous_format)


def differentiable(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``gm``, or a copy of it with every ``aten.copy`` made differentiable."""
    if not any(n.target is aten.copy.default for n in gm.graph.nodes):
        return gm
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    for node in gm.graph.nodes:
        new = graph.node_copy(node, env.__getitem__)
        if node.target is aten.copy.default:
            new.target = copy_differentiable
        env[node] = new
    return torch.fx.GraphModule(gm, graph)
