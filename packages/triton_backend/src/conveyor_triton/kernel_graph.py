"""The fusion groups of a program, as a graph a user can read.

The triton backend stamps it as its ``"kernels"`` step (Note [Stamps] in
``conveyor.protocol.stamps``): the lowered graph with each fusion group folded into
one call of its kernel, which takes the values the kernel loads and returns
the values it stores; the nodes that run as aten calls (views, fallbacks)
stay as they are. So ``print(g)`` of that stamp reads as the program runs::

    k0_mul_tanh = conveyor_triton_kernel_k0_mul_tanh(mm, arg2_1)
    tanh = k0_mul_tanh[0]

The kernel targets are stand-ins for display (calling one raises): the
program itself (``conveyor_triton.programs``) runs the kernels.
"""

from __future__ import annotations

import operator
from typing import Any

import torch.fx

from conveyor_triton.program import KernelStep, Program


class KernelLaunch:
    """Stands for one kernel in the kernel graph (for display)."""

    def __init__(self, name: str) -> None:
        self.__name__ = self.__qualname__ = name
        self.__module__ = "conveyor_triton.kernel"  # the graph's code calls it conveyor_triton_kernel_<name>

    def __call__(self, *args: Any) -> Any:
        raise RuntimeError(
            f"conveyor_triton: {self.__name__} stands for a kernel in a stamped graph; "
            "the compiled program runs it (conveyor_triton.programs)"
        )

    def __repr__(self) -> str:
        return f"<kernel {self.__name__}>"


def kernel_graph(gm: torch.fx.GraphModule, program: Program) -> torch.fx.GraphModule:
    """``gm`` (the graph ``program`` was lowered from) with each kernel's
    group folded into one call node, in the program's step order."""
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    for p in program.placeholders:
        env[p] = graph.placeholder(p.name)
        env[p].meta = dict(p.meta)
    for step in program.steps:
        if not isinstance(step, KernelStep):
            env[step.node] = graph.node_copy(step.node, env.__getitem__)
            continue
        k = step.kernel
        loads = list(dict.fromkeys(a.node for a in k.loads))
        call = graph.create_node("call_function", KernelLaunch(k.name), tuple(env[n] for n in loads), name=k.name)
        for i, store in enumerate(k.stores):
            node = graph.create_node("call_function", operator.getitem, (call, i), name=store.node.name)
            node.meta = dict(store.node.meta)
            env[store.node] = node
        for view in step.post_views:
            env[view] = graph.node_copy(view, env.__getitem__)
    graph.output(tuple(env[o] if isinstance(o, torch.fx.Node) else o for o in program.outputs))
    return torch.fx.GraphModule(gm, graph)
