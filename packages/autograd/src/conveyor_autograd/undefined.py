"""Which input gradients a backward leaves undefined: a custom Function's
``None``, or an output no loss reached.

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
``stage_api.function_grads_undefined``).

Note [Outputs no loss reaches]: a program with several outputs whose loss
uses only some of them (a model returning a pooled output beside its hidden
states, a loss over the first) gets an undefined gradient for the others
from the engine. In eager an input whose every path leads to such outputs
keeps ``.grad`` ``None`` (and an optimizer then skips it: with weight decay or
momentum a zero gradient moves the parameter). The engine materializes zeros
for a Function's undefined gradients, so the compiled backward gave those
inputs zeros. A program where that can happen (some backward output depends
on some tangents but not on all) turns materialization off; its backward
makes zeros for the undefined tangents itself, from the outputs' sizes noted
at forward (:class:`TangentSizes`), and notes which ones it made.

At compile time :meth:`UndefinedGrads.of` finds, for each output of the
backward graph, the *sources* of its gradient flow: the ``function_backward``
outputs (by the token's saved position and the output's index) and the
tangents (by position), through any op. An output with at least one source
is listed with them, unless its sources are every tangent and nothing else
(the engine calls the backward only when some tangent is defined); after
each backward the runtime makes it ``None`` when every one of them was
undefined (:meth:`UndefinedGrads.apply`), as eager's engine would. A program
without such outputs (one output, or outputs every input reaches) has no
plan and pays nothing.

Inexact where eager is finer-grained: a Function upstream that sets
``set_materialize_grads(False)`` is handed zeros, not ``None``, for a
gradient that was undefined; an input with a path to a reached output whose
gradient the backward graph computes without reading that output's tangent
(a constant zero, as ``floor``'s) and a path to an unreached one gets
``None`` where eager gives zeros. Compiled autograd copies the backward
graph into its own capture (Note [Inlined backward]) only where every tangent
is defined, so an unreached output's inputs keep ``None`` there too (the
backward runs opaquely); a Function's ``None`` gets zeros there.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
from conveyor import stage_api

from conveyor_autograd.layout import AutogradLayout, SavedIdx, TangentIdx

#: a ``function_backward`` output (the token's saved position and the
#: output's index), or a tangent of the backward graph
Source = tuple[SavedIdx, int] | TangentIdx


@dataclass(frozen=True)
class UndefinedGrads:
    """Backward-graph outputs whose gradient may be undefined, each with the
    sources that reach it (see the module's Notes).

    :ivar outputs: ``(output position, sources)``, sources non-empty.
    :ivar reads_tangents: whether a listed output has a tangent among its
        sources: the program's backward is then handed undefined tangents
        (materialization off) and makes their zeros itself."""

    outputs: tuple[tuple[int, tuple[Source, ...]], ...]

    def __post_init__(self) -> None:
        if not self.outputs or any(not sources for _, sources in self.outputs):
            raise ValueError("UndefinedGrads: every listed output needs a source (no plan is None)")

    @property
    def reads_tangents(self) -> bool:
        return any(not isinstance(s, tuple) for _, sources in self.outputs for s in sources)

    @staticmethod
    def of(backward: torch.fx.GraphModule, layout: AutogradLayout) -> UndefinedGrads | None:
        """The plan of ``backward`` (its placeholders: saved tensors first,
        as ``layout`` says), or ``None`` where no output needs one."""
        if len(layout.diff_outputs) == 1 and not any(_is_function_backward(n) for n in backward.graph.nodes):
            return None  # the common case, one pass (a program loaded from the disk cache has no Function)
        placeholders = [n for n in backward.graph.nodes if n.op == "placeholder"]
        saved = {p: SavedIdx(i) for i, p in enumerate(placeholders[: layout.num_saved_tensors])}
        tangents = {p: TangentIdx(j) for j, p in enumerate(placeholders[layout.num_saved :])}
        every_tangent = frozenset(tangents.values())
        # per node: its sources, or None where a token we cannot read reaches it (always defined)
        found: dict[torch.fx.Node, frozenset[Source] | None] = {}
        for node in backward.graph.nodes:
            found[node] = _sources(node, found, saved, tangents)
        out_node = next(n for n in reversed(backward.graph.nodes) if n.op == "output")
        outs = out_node.args[0] if isinstance(out_node.args[0], (tuple, list)) else (out_node.args[0],)
        listed = []
        for k, o in enumerate(outs):
            sources = found.get(o) if isinstance(o, torch.fx.Node) else None
            if sources and sources != every_tangent:
                listed.append((k, tuple(sorted(sources, key=_order))))
        return UndefinedGrads(tuple(listed)) if listed else None

    def apply(self, grads: Sequence[Any], saved: Sequence[Any], made: Sequence[bool] = ()) -> list[Any]:
        """``grads`` (the backward graph's outputs) with ``None`` where every
        source of an output was undefined in this backward: a
        ``function_backward`` output its Function's backward left ``None``,
        or a tangent the runtime made zeros for (``made``, by
        :data:`TangentIdx`; empty where the program does not read them)."""
        out = list(grads)
        undefined: dict[SavedIdx, tuple[bool, ...]] = {}
        for k, sources in self.outputs:
            for source in sources:
                if isinstance(source, tuple):
                    token, j = source
                    if token not in undefined:
                        undefined[token] = stage_api.function_grads_undefined(saved[token])
                    flags = undefined[token]
                    if j >= len(flags) or not flags[j]:
                        break
                elif source >= len(made) or not made[source]:
                    break
            else:
                out[k] = None
        return out


@dataclass(frozen=True)
class TangentSizes:
    """What the backward makes zeros of for an undefined tangent (Note
    [Outputs no loss reaches]): each differentiable output's shape, dtype and
    device, noted at forward."""

    of: tuple[tuple[torch.Size, torch.dtype, torch.device], ...]

    @staticmethod
    def note(outputs: Sequence[Any], diff_outputs: Sequence[int]) -> TangentSizes:
        return TangentSizes(tuple((outputs[k].shape, outputs[k].dtype, outputs[k].device) for k in diff_outputs))

    def materialized(self, tangents: Sequence[Any]) -> tuple[list[Any], tuple[bool, ...]]:
        """``tangents`` with zeros for each ``None``, and which were made."""
        made = tuple(t is None for t in tangents)
        if not any(made):
            return list(tangents), made
        out = [
            torch.zeros(shape, dtype=dtype, device=device) if t is None else t
            for t, (shape, dtype, device) in zip(tangents, self.of)
        ]
        return out, made


def _order(source: Source) -> tuple[int, int, int]:
    return (0, *source) if isinstance(source, tuple) else (1, source, 0)


def _sources(
    node: torch.fx.Node,
    found: dict[torch.fx.Node, frozenset[Source] | None],
    saved: dict[torch.fx.Node, SavedIdx],
    tangents: dict[torch.fx.Node, TangentIdx],
) -> frozenset[Source] | None:
    """``node``'s sources from its inputs' (``None``: always defined)."""
    if node.op == "placeholder":
        return frozenset({tangents[node]}) if node in tangents else frozenset()
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
