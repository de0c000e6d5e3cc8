"""The dedupe stage: the same tensor passed in several positions becomes one
graph input.

Compile time: the inner graph takes each distinct tensor once; it is traced
from a function that repeats each tensor in every position it was passed in
and runs the received graph, so every op, in-place ones included, applies to
the one tensor in program order, as in eager.

Run time: the prologue drops the repeated arguments; there is no epilogue
(mutations of the one tensor are mutations of every position).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import conveyor
import torch
import torch.fx
from conveyor import CompiledFn, Lowering, Request
from conveyor.stage_api import reducible

from conveyor_dedupe.keys import cache_key
from conveyor_dedupe.mapping import DedupeMap

__all__ = ["Dedupe", "cache_key"]


class Dedupe:
    """The stage implementation (``lower``)."""

    def lower(self, request: Request, options: Mapping[str, Any]) -> Lowering:
        # the program record's aliasing (declared in reads): which inputs are one tensor
        mapping = DedupeMap.from_first_positions(request.program.aliasing.same)
        if not mapping.has_duplicates:
            return Lowering.passthrough(request)
        inner_inputs = tuple(mapping.to_inner(request.inputs))
        with torch.set_grad_enabled(request.grad_enabled):
            graph = conveyor.retrace(_expanding(request.graph, mapping), inner_inputs, request.fake_mode)
        inner = request.replace(graph=graph, inputs=inner_inputs)
        return Lowering((inner,), lambda compiled: _deduping(compiled, mapping))


def _expanding(graph: torch.fx.GraphModule, mapping: DedupeMap) -> Any:
    def expanded(*inner: Any) -> tuple[Any, ...]:
        return conveyor.call_graph(graph, mapping.to_outer(inner))

    return expanded


def _deduping(compiled: CompiledFn, mapping: DedupeMap) -> CompiledFn:
    def run(args: list[Any]) -> Sequence[Any]:
        inner = mapping.to_inner(args)
        args.clear()
        return compiled(inner)

    return reducible(run, _deduping, compiled, mapping)  # Note [Picklable run-time callables] in conveyor.protocol.artifacts

