"""The ``functionalize`` stage: its registration and its compile-time half."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from conveyor import Lowering, Request, StageError, StageSpec, hookimpl

from conveyor_functionalize.analysis import analyze_run
from conveyor_functionalize.epilogue import EpiloguePlan
from conveyor_functionalize.layout import FunctionalLayout
from conveyor_functionalize.self_overlap import (
    SPARSE_COMPRESSED_REASON,
    eager_lowering,
    makes_sparse_compressed,
    sparse_compressed_with_grad,
    written_self_overlapping,
)
from conveyor_functionalize.trace import trace_functional, writing_nodes
from conveyor_functionalize.views import no_grad_view_outputs

STAGE = "functionalize"
META_FACT = "functionalize.meta"
LAYOUT_FACT = "functionalize.layout"


class Functionalize:
    """Trace the request functionalized; wrap the inner callable in the
    epilogue that replays mutations and output aliases on the caller's tensors.

    Note [Views under inference_mode]: a program compiled under
    ``torch.inference_mode()`` would be analysed on inference tensors, whose
    views record no ``_base`` (so outputs that view one intermediate look
    like unrelated fresh tensors) and which functionalization refuses to
    resize. The stage analyses and traces with inference mode off (unless an
    input requires grad: a functional wrapper of an inference tensor cannot);
    the graph is the same, and at run time it runs under the caller's mode."""

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
        with torch.set_grad_enabled(request.grad_enabled):
            meta, run = analyze_run(request.graph, request.inputs, request.fake_mode)
            overlapping = written_self_overlapping(request.inputs, [info.mutates_data for info in meta.inputs])
            if overlapping:  # Note [Writes through a self-overlapping input]
                return eager_lowering(request, STAGE, overlapping)
            layout = FunctionalLayout.of(meta)
            views = no_grad_view_outputs(request.graph)  # Note [Views taken under no_grad]
            plan = EpiloguePlan.build(meta, run, layout, request.inputs, request.grad_enabled, views)
            graph = trace_functional(request.graph, request.inputs, request.fake_mode, layout)
        left = writing_nodes(graph)
        if left:
            raise StageError(STAGE, f"cannot functionalize {left[0].target}: the traced graph still writes with it")
        inner = request.replace(graph=graph).with_facts(**{META_FACT: meta, LAYOUT_FACT: layout})
        return Lowering((inner,), plan.wrap)


@hookimpl
def conveyor_register_stages(register: Callable[[StageSpec], None]) -> None:
    register(
        StageSpec(
            name=STAGE,
            kind="wrapper",
            impl=Functionalize(),
            after=("dedupe", "synthetic_base"),
            description="hands inner stages a purely functional graph; replays mutations and output aliases at run time",
        )
    )
