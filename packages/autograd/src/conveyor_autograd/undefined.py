"""Which input gradients a custom Function's backward left undefined.

Note [Gradients a Function's backward leaves undefined]: a custom
``torch.autograd.Function`` whose ``backward`` returns ``None`` for a tensor
that requires grad hands autograd's engine an undefined gradient. The engine
passes it on: a node whose every incoming gradient is undefined returns
undefined ones (a Python Function's node first materializes zeros, unless its
``ctx`` says not to), and a leaf reached by nothing else keeps ``.grad``
``None``. A Function applied in a compiled program runs its backward at run
time as one op, ``conveyor::function_backward`` (Note [A Function's backward
at run time] in the core's ``conveyor.frontend.function_records``), whose
outputs are tensors: zeros where the backward returned ``None``. So the
backward graph cannot say ``None``, and whether the user's backward says it
is known only when it runs.

The op notes which of its gradients were ``None`` on its application (read
through the *token* the backward graph passes it, a saved tensor:
``stage_api.function_grads_undefined``). At compile time
:meth:`UndefinedGrads.of` finds, for each output of the backward graph, the
*sources* of its gradient flow: the ``function_backward`` outputs (by the
token's saved position and the output's index) and the tangents it depends
on, through any op. An output that depends on at least one
``function_backward`` output and on no tangent is listed with those
sources; after each backward the runtime makes it ``None`` when every one
of them was ``None`` (:meth:`UndefinedGrads.apply`), as eager's engine
would. A program without such outputs has no plan and pays nothing.

Inexact where eager is finer-grained: a Function upstream that sets
``set_materialize_grads(False)`` is handed zeros, not ``None``, for a
gradient that was undefined; a tangent (the gradient of a program output no
loss reaches) counts as defined, as the runtime receives it materialized.
Compiled autograd copies the backward graph into its own capture (Note
[Inlined backward]) and gets zeros there.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
from conveyor import stage_api

from conveyor_autograd.layout import AutogradLayout, SavedIdx

#: a ``function_backward`` output: the token's saved position and the output's index
Source = tuple[SavedIdx, int]


@dataclass(frozen=True)
class UndefinedGrads:
    """Backward-graph outputs whose gradient only ``function_backward``
    outputs reach, each with those sources (see the module's Note).

    :ivar outputs: ``(output position, sources)``, sources non-empty."""

    outputs: tuple[tuple[int, tuple[Source, ...]], ...]

    def __post_init__(self) -> None:
        if not self.outputs or any(not sources for _, sources in self.outputs):
            raise ValueError("UndefinedGrads: every listed output needs a source (no plan is None)")

    @staticmethod
    def of(backward: torch.fx.GraphModule, layout: AutogradLayout) -> UndefinedGrads | None:
        """The plan of ``backward`` (its placeholders: saved tensors first,
        as ``layout`` says), or ``None`` where no output needs one."""
        if not any(_is_function_backward(n) for n in backward.graph.nodes):
            return None  # the common case, one pass (a program loaded from the disk cache has no Function)
        placeholders = [n for n in backward.graph.nodes if n.op == "placeholder"]
        saved = {p: SavedIdx(i) for i, p in enumerate(placeholders[: layout.num_saved_tensors])}
        tangents = set(placeholders[layout.num_saved :])
        # per node: its sources, or DEFINED where a tangent (or a token we cannot read) reaches it
        found: dict[torch.fx.Node, frozenset[Source] | None] = {}
        for node in backward.graph.nodes:
            found[node] = _sources(node, found, saved, tangents)
        out_node = next(n for n in reversed(backward.graph.nodes) if n.op == "output")
        outs = out_node.args[0] if isinstance(out_node.args[0], (tuple, list)) else (out_node.args[0],)
        listed = []
        for k, o in enumerate(outs):
            sources = found.get(o) if isinstance(o, torch.fx.Node) else None
            if sources:
                listed.append((k, tuple(sorted(sources))))
        return UndefinedGrads(tuple(listed)) if listed else None

    def apply(self, grads: Sequence[Any], saved: Sequence[Any]) -> list[Any]:
        """``grads`` (the backward graph's outputs) with ``None`` where every
        source of an output was ``None`` in this backward."""
        out = list(grads)
        undefined: dict[SavedIdx, tuple[bool, ...]] = {}
        for k, sources in self.outputs:
            for token, j in sources:
                if token not in undefined:
                    undefined[token] = stage_api.function_grads_undefined(saved[token])
                flags = undefined[token]
                if j >= len(flags) or not flags[j]:
                    break
            else:
                out[k] = None
        return out


def _sources(
    node: torch.fx.Node,
    found: dict[torch.fx.Node, frozenset[Source] | None],
    saved: dict[torch.fx.Node, SavedIdx],
    tangents: set[torch.fx.Node],
) -> frozenset[Source] | None:
    """``node``'s sources from its inputs' (``None``: defined)."""
    if node.op == "placeholder":
        return None if node in tangents else frozenset()
    if node.op == "call_function" and node.target is operator.getitem and _is_function_backward(node.args[0]):
        token = node.args[0].args[1]  # type: ignore[union-attr]
        if not isinstance(token, torch.fx.Node) or token not in saved or not isinstance(node.args[1], int):
            return None
        return frozenset({(saved[token], node.args[1])})
    if _is_function_backward(node):
        return None  # read through its getitems only
    union: set[Source] = set()
    for arg in node.all_input_nodes:
        sources = found.get(arg)
        if sources is None:
            return None
        union |= sources
    return frozenset(union)


def _is_function_backward(node: Any) -> bool:
    target = getattr(node, "target", None)
    return isinstance(target, torch._ops.OpOverload) and target.name() == stage_api.FUNCTION_BACKWARD_OP
