"""The synthetic_base stage: inputs that overlap and are mutated become one
base, so no inner stage ever sees two inputs sharing memory that matters.

Compile time: plan the bases (:mod:`~conveyor_synthetic_base.plan`), then
trace the inner graph from a function that takes the bases in place of the
merged inputs, regenerates each merged input from its base, runs the
received graph, and returns the user's outputs plus the merged inputs whose
metadata changed. Data mutations of merged inputs are mutations of views of
one input to the inner stages, which handle them.

Run time: the prologue builds each base from the caller's tensors; the
epilogue (:mod:`~conveyor_synthetic_base.epilogue`) applies metadata
mutations to the caller's tensors and drops the extra outputs.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import conveyor
import torch
from conveyor import CompiledFn, Lowering, Request, stage_api
from conveyor.stage_api import (
    STORAGE_ADDRESSING_REASON,
    as_strided_of_part,
    is_view,
    overlaps_itself,
    reducible,
    swaps_storage,
    written_positions,
)

from conveyor_synthetic_base.analysis import mutations
from conveyor_synthetic_base.epilogue import OutputLayout, UserOutIdx
from conveyor_synthetic_base.mapping import BaseMap, OuterIdx
from conveyor_synthetic_base.plan import plan
from conveyor_synthetic_base.sharing import cache_key, shared_storages

__all__ = ["SyntheticBaseStage", "cache_key"]


class SyntheticBaseStage:
    """The stage implementation (``lower``)."""

    def lower(self, request: Request, options: Mapping[str, Any]) -> Lowering:
        with torch.set_grad_enabled(request.grad_enabled):  # trace as the program will run
            return self._lower(request, options)

    def _lower(self, request: Request, options: Mapping[str, Any]) -> Lowering:
        shared = shared_storages(request.inputs, request.program.aliasing.groups)  # the record's (declared)
        if not shared:
            return Lowering.passthrough(request)
        if as_strided_of_part(request.graph) is not None:  # Note [Storage offsets functionalization cannot replay]
            return stage_api.eager_lowering(request, "synthetic_base", STORAGE_ADDRESSING_REASON)
        muts = mutations(request)
        overlapping = sorted(i for i in muts.data if overlaps_itself(request.inputs[i]))
        if overlapping:  # Note [Writes through a self-overlapping input] in conveyor_functionalize
            reason = (
                f"it writes through input(s) {overlapping}, whose elements share memory: functionalization cannot "
                "express such a write (Note [Writes through a self-overlapping input])"
            )
            return stage_api.eager_lowering(request, "synthetic_base", reason)
        bases = plan(shared, muts, tight=options["tight"])
        if not bases:
            return Lowering.passthrough(request)
        mapping = BaseMap.place(len(request.inputs), bases)
        swapped = sorted(set(_swapped_inputs(request.graph)) & set(mapping.merged()))
        if swapped:  # Note [Storage swaps of inputs sharing a storage]
            reason = (
                f"it sets input(s) {swapped}, which share their storage with another input, onto another storage "
                "(Note [Storage swaps of inputs sharing a storage])"
            )
            return stage_api.eager_lowering(request, "synthetic_base", reason)
        metadata_of = tuple(o for o in mapping.merged() if o in muts.metadata)
        returned: list[tuple[UserOutIdx, OuterIdx]] = []
        with request.fake_mode:
            inner_inputs = tuple(mapping.to_inner(request.inputs))
        graph = conveyor.retrace(
            _regenerating(request, mapping, metadata_of, returned), inner_inputs, request.fake_mode
        )
        layout = OutputLayout(_user_count(request), metadata_of, tuple(returned))
        inner = request.replace(graph=graph, inputs=inner_inputs)
        return Lowering((inner,), lambda compiled: _wrapped(compiled, mapping, layout))


# Note [Storage swaps of inputs sharing a storage]: ``a.set_(...)`` of an
# input that shares its storage with another input moves ``a`` off the
# storage the other still reads; a synthetic base holds one storage for both,
# and regenerates ``a`` as a view of it, so the swap became a write into the
# base (``a.set_()`` under ``no_grad`` scattered an empty tensor into it: a raw
# RuntimeError from ``slice_scatter``, h_fuzz2's B14). Such a program runs
# eagerly, with a warning, as functionalization's own rule does for inputs
# that share a storage and are not merged (Note [Storage swaps
# functionalization cannot replay] in ``conveyor_functionalize``).


def _swapped_inputs(graph: torch.fx.GraphModule) -> list[int]:
    """The inputs ``graph`` sets onto another storage (``set_``), itself or a
    view of it (Note [Storage swaps of inputs sharing a storage])."""
    placeholders = {n: i for i, n in enumerate(n for n in graph.graph.nodes if n.op == "placeholder")}
    found = []
    for node in graph.graph.nodes:
        if node.op == "call_function" and swaps_storage(node) and node.args:
            root = node.args[0]
            while isinstance(root, torch.fx.Node) and root.op == "call_function" and root.args:
                if not (is_view(root) or (0, "self") in written_positions(root)):
                    break
                root = root.args[0]
            if root in placeholders:
                found.append(placeholders[root])
    return found


def _user_count(request: Request) -> int:
    (output,) = (n for n in request.graph.graph.nodes if n.op == "output")
    return len(output.args[0])


def _regenerating(
    request: Request,
    mapping: BaseMap,
    metadata_of: tuple[OuterIdx, ...],
    returned: list[tuple[UserOutIdx, OuterIdx]],
) -> Any:
    """The inner program; records which user outputs are a merged input."""
    merged = mapping.merged()

    def program(*inner: Any) -> tuple[Any, ...]:
        outer = mapping.to_outer(inner)
        outs = conveyor.call_graph(request.graph, outer)
        returned[:] = [(UserOutIdx(k), o) for k, out in enumerate(outs) for o in merged if out is outer[o]]
        return (*outs, *(outer[o] for o in metadata_of))

    return program


def _wrapped(compiled: CompiledFn, mapping: BaseMap, layout: OutputLayout) -> CompiledFn:
    def run(args: list[Any]) -> Sequence[Any]:
        outs = compiled(mapping.to_inner(args))
        return layout.apply(args, outs)

    return reducible(run, _wrapped, compiled, mapping, layout)  # Note [Picklable run-time callables] in conveyor.protocol.artifacts

