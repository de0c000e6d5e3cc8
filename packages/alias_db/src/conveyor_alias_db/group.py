"""Fusion groups: a node of the outer graph that runs a subgraph.

A group node is ``call_function`` with a ``FusedGroup`` target. Its ``args`` are
the group's inputs, and the inner graph has one placeholder per input, in the
same order. The inner graph returns a tuple; the outer graph reads the elements
with ``operator.getitem(group, i)`` nodes. ``AliasDb.create_group`` and
``AliasDb.merge_into_group`` build them; a backend compiles ``FusedGroup.graph``
as one kernel, and the plain FX interpreter runs the group as it is.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx


class FusedGroup:
    """The target of a group node: a callable that runs ``graph`` on the group's inputs.

    :ivar graph: the inner graph (placeholders first, one per group input; one
        output node returning a tuple).
    """

    def __init__(self, graph: torch.fx.Graph, name: str = "fused_group") -> None:
        self.graph = graph
        self.__name__ = name
        self._module: torch.fx.GraphModule | None = None

    def __repr__(self) -> str:
        return f"FusedGroup({self.__name__}, {len(self.graph.nodes)} nodes)"

    def changed(self) -> None:
        """Forget the compiled inner graph after it was rewritten."""
        self._module = None

    def __call__(self, *args: Any) -> tuple[Any, ...]:
        if self._module is None:
            self._module = torch.fx.GraphModule(torch.nn.Module(), self.graph)
        return tuple(self._module(*args))

    def placeholders(self) -> list[torch.fx.Node]:
        """The inner placeholders, in input order."""
        found = []
        for node in self.graph.nodes:
            if node.op != "placeholder":
                break
            found.append(node)
        return found

    def output_node(self) -> torch.fx.Node:
        """The inner graph's output node."""
        return self.graph.output_node()

    def outputs(self) -> tuple[torch.fx.Node, ...]:
        """The inner values the group returns, in output order."""
        values = self.output_node().args[0]
        if not isinstance(values, tuple):
            raise ValueError(f"{self.__name__} does not return a tuple: {values!r}")
        nodes = tuple(v for v in values if isinstance(v, torch.fx.Node))
        if len(nodes) != len(values):
            raise ValueError(f"{self.__name__} returns a constant: {values!r}")
        return nodes


def group_of(node: torch.fx.Node) -> FusedGroup | None:
    """The ``FusedGroup`` that ``node`` runs, or ``None`` when it is not a group node."""
    if node.op == "call_function" and isinstance(node.target, FusedGroup):
        return node.target
    return None
