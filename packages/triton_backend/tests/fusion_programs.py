"""Random programs for the fusion pass, traced as the backend traces them
(its decompositions, functionalize off: writes stay in the graph).

A program is a list of ``(op, i, j)`` steps on a pool of values that starts
with the inputs ``a``, ``b`` (4 x 8; ``b`` a transposed view of ``a``'s memory
when the inputs alias) and ``c`` (8,). Each step applies ``op`` to the pool
values at ``i`` and ``j`` (modulo the pool's size) where their shapes allow,
else a fallback of the same op on ``x`` alone, so every program is valid.
The ops cover what the fuser decides on: pointwise chains and broadcasts
(absorbed producers, some recomputed at a larger shape), reductions over trailing and leading dimensions
(row and permuted groups), softmax and layer norm (shared reduction domains),
order-keeping and other views, a matmul (an aten fallback), and in-place writes
to inputs, intermediates and views (memory order).
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import torch
import torch.fx
from conveyor_alias_db import input_aliasing
from conveyor_triton.classify import NodeClass, classify
from conveyor_triton.decompose import table
from torch.fx.experimental.proxy_tensor import make_fx

OPS = [
    "add", "mul", "sin", "relu", "exp", "bias", "add_", "mul_", "view", "t", "unsqueeze",
    "slice", "sum_last", "sum_first", "amax", "softmax", "norm", "mm", "expand_mul", "gate", "scale",
]  # fmt: skip

Steps = list[tuple[str, int, int]]


def _step(pool: list[torch.Tensor], op: str, x: torch.Tensor, y: torch.Tensor) -> None:
    same = y.shape == x.shape
    if op in ("add", "mul"):
        pool.append(getattr(torch, op)(x, y if same else 1.5))
    elif op in ("sin", "relu", "exp"):
        pool.append(getattr(torch, op)(x))
    elif op == "bias":
        pool.append(x + pool[2] if x.dim() >= 1 and x.shape[-1] == 8 else x - 0.5)
    elif op in ("add_", "mul_"):
        getattr(x, op)(y.sin() if same else 0.5)
    elif op == "view":
        pool.append(x.view(-1) if x.is_contiguous() else x.reshape(-1))
    elif op == "t":
        pool.append(x.t() if x.dim() == 2 else x.unsqueeze(-1))
    elif op == "unsqueeze":
        pool.append(x.unsqueeze(0) if x.dim() < 3 else x.squeeze(0))
    elif op == "slice":
        pool.append(x[1:] if x.dim() >= 1 and x.shape[0] > 1 else x * 3)
    elif op == "sum_last":
        pool.append(x.sum(-1, keepdim=True) if x.dim() >= 1 else x + 1)
    elif op == "sum_first":
        pool.append(x.sum(0) if x.dim() >= 2 else x.sum())
    elif op == "amax":
        pool.append(x.amax(-1) if x.dim() >= 1 and x.numel() else x + 2)
    elif op == "softmax":
        pool.append(torch.softmax(x, -1) if x.dim() >= 1 else x.exp())
    elif op == "norm":
        pool.append(torch.nn.functional.layer_norm(x, (8,), pool[2]) if x.dim() == 2 and x.shape[-1] == 8 else x.relu())
    elif op == "mm":
        pool.append(x @ x.t() if x.dim() == 2 else x * x)
    elif op == "gate":  # a producer recomputed at each element of its user
        pool.append(x * pool[2].sigmoid() if x.dim() >= 1 and x.shape[-1] == 8 else x.abs())
    elif op == "scale":  # a producer absorbed into its user's group
        pool.append(x * y.exp() if same else x.cos())
    else:  # expand_mul: a row value broadcast along a full one
        pool.append(x * y.sum(-1, keepdim=True).cos() if x.dim() == 2 and same else x.neg())


def program(steps: Steps) -> Callable[..., tuple[torch.Tensor, ...]]:
    """The function the ``steps`` describe."""

    def fn(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, ...]:
        pool = [a, b, c]
        for op, i, j in steps:
            _step(pool, op, pool[i % len(pool)], pool[j % len(pool)])
        return tuple(pool[3:]) or (a + 0,)

    return fn


def random_steps(seed: int, size: int = 14) -> Steps:
    """A program of up to ``size`` steps, the same one for the same seed."""
    rng = random.Random(seed)
    return [(rng.choice(OPS), rng.randrange(24), rng.randrange(24)) for _ in range(rng.randint(1, size))]


def inputs(alias: bool, seed: int = 0) -> list[torch.Tensor]:
    """Real inputs: ``b`` shares ``a``'s memory when ``alias``."""
    gen = torch.Generator(device="cpu").manual_seed(seed)  # drawn on the CPU, moved to the default device
    drawn = [torch.randn(s, generator=gen, device="cpu").to(torch.get_default_device()) for s in [(4, 8), (4, 8), (8,)]]
    a = drawn[0]
    return [a, a.view(8, 4).t() if alias else drawn[1], drawn[2]]


def trace(fn: Callable[..., Any], args: list[torch.Tensor]) -> torch.fx.GraphModule:
    """``fn`` traced as the backend traces it, functionalize off."""
    return make_fx(fn, tracing_mode="fake", decomposition_table=table())(*args)


def fuser_inputs(gm: torch.fx.GraphModule) -> tuple[dict[torch.fx.Node, NodeClass], list[list[torch.fx.Node]]]:
    """What ``Fuser`` takes besides the graph: node classes and input aliasing."""
    values = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
    classes = {n: classify(n) for n in gm.graph.nodes if n.op == "call_function"}
    return classes, input_aliasing(gm.graph, values)


def groups_of(steps: Any) -> list[list[list[str]]]:
    """The fuser's groups in a form independent of its internals: each group's
    members as ``[name, kind]`` pairs by name, the groups sorted."""
    found = [
        sorted([m.name, k] for m, k in s.group.members.items())
        for s in steps
        if s.group is not None and s.group.members
    ]
    return sorted(found)
