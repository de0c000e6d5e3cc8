"""Functional ops without a right autograd formula, rewritten for the joint trace.

Functionalization turns ``dst.copy_(src)`` (and ``x[i] = y``) into the
functional ``aten.copy(dst, src)``, which autograd cannot differentiate
("derivative for aten::copy is not implemented"): AOTAutograd never meets it
because it runs autograd above functionalization. Here autograd runs on the
functional graph, so before the joint trace each ``copy`` becomes the
equivalent differentiable expression: ``src`` converted to ``dst``'s dtype and
device, broadcast to its shape, materialized (contiguous). Its gradient flows to ``src``
only, as ``copy_``'s does.

Note [Functional ops whose formula reads a written argument]: functionalization
turns ``rrelu_with_noise(x, noise)`` (what ``F.rrelu`` and ``nn.RReLU`` call
in training) into ``rrelu_with_noise_functional``, which returns the noise it
drew instead of writing it. torch's formula for that functional op differentiates
with its ``noise`` *argument*: the buffer before the draw (``empty_like``,
uninitialized), where the in-place op's formula reads the buffer after it. Under
AOTAutograd autograd runs above functionalization and never meets the functional
op; here it does, and the gradient was uninitialized memory (found by the
test_cpu_repro.py sweep). In training the op's result is exactly ``x *
noise_out`` (``x`` where ``x > 0``, where the noise is 1; ``x * r`` elsewhere, as
the kernel computes it), so that is what the joint trace differentiates; without
training the formula never reads the noise and the op stays as it is. A program
that calls the functional op itself gets the in-place op's gradient, not torch's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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


def rrelu_with_noise_differentiable(
    x: torch.Tensor,
    noise: torch.Tensor,
    lower: float = 0.125,
    upper: float = 1.0 / 3.0,
    training: bool = False,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``aten.rrelu_with_noise_functional`` with the in-place op's gradient
    (Note [Functional ops whose formula reads a written argument])."""
    if not (training and x.requires_grad):
        return aten.rrelu_with_noise_functional.default(x, noise, lower, upper, training, generator=generator)
    _, noise_out = aten.rrelu_with_noise_functional.default(x.detach(), noise, lower, upper, training, generator=generator)
    return x * noise_out, noise_out


#: functional op -> the differentiable expression the joint trace runs instead
_REWRITES: dict[Any, Callable[..., Any]] = {
    aten.copy.default: copy_differentiable,
    aten.rrelu_with_noise_functional.default: rrelu_with_noise_differentiable,
}


def differentiable(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``gm``, or a copy of it with every op of :data:`_REWRITES` made differentiable."""
    if not any(n.target in _REWRITES for n in gm.graph.nodes):
        return gm
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    for node in gm.graph.nodes:
        new = graph.node_copy(node, env.__getitem__)
        if node.target in _REWRITES:
            new.target = _REWRITES[node.target]
        env[node] = new
    return torch.fx.GraphModule(gm, graph)
