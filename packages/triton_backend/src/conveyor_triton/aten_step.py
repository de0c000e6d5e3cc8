"""Aten steps of a triton program: the views and fallbacks that run
between kernels, each as one call written once (Note [Node calls])."""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from conveyor_triton import metrics
from conveyor_triton.classify import is_view


def run_node(node: torch.fx.Node, env: dict[torch.fx.Node, Any], module: torch.fx.GraphModule | None) -> Any:
    """Run one node as aten (a fallback, a view, or a ``get_attr``)."""
    if node.op == "get_attr":
        obj: Any = module
        for part in str(node.target).split("."):
            obj = getattr(obj, part)
        return obj
    args = torch.fx.node.map_arg(node.args, lambda n: env[n])
    kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: env[n])
    return node.target(*args, **kwargs)  # type: ignore[operator]


# Note [Node calls]: a program runs each aten call and view on every call of
# the compiled function; walking the node's arguments with ``map_arg`` each
# time (twice: args and kwargs) cost about as much as the call itself on a
# training step's hundred views and fallbacks. :func:`node_call` writes the
# call once as a Python function of the environment, ``target(env[a], 2,
# [env[b], env[c]])``, with constants bound by name, and the steps call that;
# it is rebuilt after unpickling (Note [Picklable run-time callables]).


def node_call(node: torch.fx.Node) -> Callable[[dict[torch.fx.Node, Any]], Any]:
    """``node``'s call (a ``call_function`` node) as a function of the
    environment (Note [Node calls])."""
    # an OpOverload's __call__ only forwards to its C++ op: call that (one Python frame less per call)
    bound: dict[str, Any] = {"target": getattr(node.target, "_op", node.target)}

    def emit(a: Any) -> str:
        if isinstance(a, torch.fx.Node):
            name = f"n{len(bound)}"
            bound[name] = a
            return f"env[{name}]"
        if isinstance(a, (list, tuple)):  # fx's immutable_list too; a torch.Size becomes a tuple
            inner = ", ".join(emit(x) for x in a)
            if isinstance(a, list):
                return f"[{inner}]"
            return f"({inner},)" if inner else "()"
        name = f"c{len(bound)}"
        bound[name] = a
        return name

    if any(isinstance(v, dict) for v in (*node.args, *node.kwargs.values())):  # not written out: walked per call
        return lambda env: run_node(node, env, None)
    parts = [emit(a) for a in node.args] + [f"{k}={emit(v)}" for k, v in node.kwargs.items()]
    return eval(f"lambda env: target({', '.join(parts)})", bound)  # noqa: S307 - our own source


@dataclass
class AtenStep:
    node: torch.fx.Node
    module: torch.fx.GraphModule
    _call: Any = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_call": None}  # Note [Node calls]: rebuilt when first run

    def reads(self) -> set[torch.fx.Node]:
        """The values this step reads from the environment."""
        return set(self.node.all_input_nodes)

    def run(self, env: dict[torch.fx.Node, Any]) -> None:
        call = self._call
        if call is None:
            node = self.node
            call = self._call = (
                node_call(node) if node.op == "call_function" else (lambda e: run_node(node, e, self.module))
            )
        env[self.node] = out = call(env)
        if metrics.active() and self.launches:
            reads = [env[n] for n in self.node.all_input_nodes]
            metrics.record("aten", reads, [out])

    @property
    def launches(self) -> bool:
        """Whether this call is a kernel of its own (not a view, not a getitem)."""
        node = self.node
        return node.op == "call_function" and node.target is not operator.getitem and not is_view(node)
