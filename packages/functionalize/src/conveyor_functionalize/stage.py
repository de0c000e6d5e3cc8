"""The ``functionalize`` stage's compile-time half (registered by
:mod:`conveyor_functionalize.plugin`, which imports this module only when
the stage first runs: Note [Stage implementations imported when they run] in
``conveyor.protocol.lazy``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from conveyor import Lowering, Request
from conveyor.stage_api import STORAGE_ADDRESSING_REASON, as_strided_of_part

from conveyor_functionalize.decompositions import DECOMPOSITIONS, EAGER_KERNELS
from conveyor_functionalize.dtype_views import REASON as DTYPE_VIEW_REASON
from conveyor_functionalize.dtype_views import writes_through_dtype_view
from conveyor_functionalize.epilogue import EpiloguePlan
from conveyor_functionalize.hidden_writes import REASON as HIDDEN_WRITE_REASON
from conveyor_functionalize.hidden_writes import data_aliases, hidden_write_detaches
from conveyor_functionalize.layout import FunctionalLayout
from conveyor_functionalize.one_run import in_one_run, lower_in_one_run
from conveyor_functionalize.overlapping import check_no_mutated_aliases
from conveyor_functionalize.resize_format import GROW_REASON as RESIZE_AS_REASON
from conveyor_functionalize.resize_format import REASON as RESIZE_FORMAT_REASON
from conveyor_functionalize.resize_format import grows_with_resize_as, resizes_into_memory_format
from conveyor_functionalize.self_overlap import (
    SPARSE_COMPRESSED_REASON,
    VIEW_REASON,
    eager_lowering,
    makes_sparse_compressed,
    sparse_compressed_with_grad,
    writes_through_self_overlapping_view,
    written_self_overlapping,
)
from conveyor_functionalize.swaps import unreplayable_swap
from conveyor_functionalize.trace import functional_lowering, trace_functional
from conveyor_functionalize.views import no_grad_view_outputs

STAGE = "functionalize"


class Functionalize:
    """Trace the request functionalized; wrap the inner callable in the
    epilogue that replays mutations and output aliases on the caller's tensors.

    What the program mutates and how its outputs alias is the core's record
    (``request.program.meta``), read from the stage's own trace where that
    is exact (Note [One functional run]); a program the record knows to be
    functional from its graph alone passes through untraced (Note [Nothing
    to functionalize]).

    Note [Views under inference_mode] (``conveyor.analysis.program``): the stage
    traces with inference mode off as the record analyses (unless an input
    requires grad); the graph is the same, and at run time it runs under the
    caller's mode."""

    def lower(self, request: Request, options: Mapping[str, Any]) -> Lowering:
        # Note [Views under inference_mode]
        requires_grad = any(isinstance(t, torch.Tensor) and t.requires_grad for t in request.inputs)
        with torch.inference_mode(torch.is_inference_mode_enabled() and requires_grad):
            return self._lower(request)

    def _lower(self, request: Request) -> Lowering:
        compressed = sparse_compressed_with_grad(request.inputs)
        if compressed:  # Note [Sparse compressed inputs that require grad]
            return eager_lowering(request, STAGE, compressed, SPARSE_COMPRESSED_REASON)
        maker = makes_sparse_compressed(request.graph) if request.grad_enabled else None
        if maker is not None and any(isinstance(t, torch.Tensor) and t.requires_grad for t in request.inputs):
            return eager_lowering(request, STAGE, [], f"{maker.target} with grad: {SPARSE_COMPRESSED_REASON}")
        if _nothing_to_do(request):  # Note [Nothing to functionalize]
            return Lowering.passthrough(request)
        if as_strided_of_part(request.graph) is not None:  # Note [Storage offsets functionalization cannot replay]
            return eager_lowering(request, STAGE, [], STORAGE_ADDRESSING_REASON)
        swap = unreplayable_swap(request.graph, request.inputs, request.grad_enabled)
        if swap is not None:  # Note [Storage swaps functionalization cannot replay]
            return eager_lowering(request, STAGE, [], swap)
        if writes_through_dtype_view(request.graph, request.inputs, request.grad_enabled):
            return eager_lowering(request, STAGE, [], DTYPE_VIEW_REASON)  # Note [Writes through a dtype view]
        if resizes_into_memory_format(request.graph):  # Note [Resizes into a memory format]
            return eager_lowering(request, STAGE, [], RESIZE_FORMAT_REASON)
        if grows_with_resize_as(request.graph):  # Note [resize_as_ that grows a tensor]
            return eager_lowering(request, STAGE, [], RESIZE_AS_REASON)
        if writes_through_self_overlapping_view(request.graph):
            return eager_lowering(request, STAGE, [], VIEW_REASON)  # Note [Writes through a self-overlapping view]
        hidden = hidden_write_detaches(request.graph, request.inputs, request.grad_enabled)
        if hidden:  # Note [Writes hidden from autograd to a saved tensor]
            graph = data_aliases(request.graph, hidden)
            return eager_lowering(request.replace(graph=graph), STAGE, [], HIDDEN_WRITE_REASON)
        if in_one_run(request):  # Note [One functional run]
            lowered = lower_in_one_run(request)
            if lowered is not None:
                return lowered
        return self._lower_analysed(request)

    def _lower_analysed(self, request: Request) -> Lowering:
        """The record's analysis first (a run of its own), then the trace."""
        analysis = request.program.analysis
        meta, run = analysis.meta, analysis.run
        check_no_mutated_aliases(request.program)
        with torch.set_grad_enabled(request.grad_enabled):
            overlapping = written_self_overlapping(request.inputs, [info.mutates_data for info in meta.inputs])
            if overlapping:  # Note [Writes through a self-overlapping input]
                return eager_lowering(request, STAGE, overlapping)
            layout = FunctionalLayout.of(meta)
            views = no_grad_view_outputs(request.graph)  # Note [Views taken under no_grad]
            plan = EpiloguePlan.build(meta, run, layout, request.inputs, request.grad_enabled, views)
            graph = trace_functional(request.graph, request.inputs, request.fake_mode, lambda run, kept: layout)
        return functional_lowering(request, graph, plan)


def _nothing_to_do(request: Request) -> bool:
    """Note [Nothing to functionalize]: a program that writes nothing and
    whose outputs are all computed (``request.program.statically_functional``:
    no output is an input, a view of one or another output) is functional
    already: the analysis would find nothing to replay and the trace would
    give the same graph, so it passes through untraced and unanalysed,
    unless it holds an op the functional graph spells otherwise
    (``DECOMPOSITIONS``, ``EAGER_KERNELS``) or returns a view taken under
    ``no_grad`` (Note [Views taken under no_grad])."""
    if not request.program.statically_functional:
        return False
    if any(n.op == "call_function" and (n.target in DECOMPOSITIONS or n.target in EAGER_KERNELS) for n in request.graph.graph.nodes):
        return False
    return not no_grad_view_outputs(request.graph)

