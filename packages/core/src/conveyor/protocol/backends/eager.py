"""The reference backend: run the final FX graph with aten, as it is."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch.fx
from torch.fx._lazy_graph_module import _use_lazy_graph_module

from conveyor.analysis.grad_regions import drop_inert_detaches
from conveyor.protocol.artifacts import reducible
from conveyor.protocol.backends.direct_calls import direct_forward
from conveyor.protocol.backends.fold_views import fold_transpose_pairs, keepdim_views, linear_calls
from conveyor.protocol.backends.movement import collapse_movement
from conveyor.protocol.backends.restack import stack_copies
from conveyor.protocol.backends.rewriting import Rewrite, rewritten
from conveyor.protocol.stage import CompiledFn, Request
from conveyor.protocol.stamps import stamp


class EagerBackend:
    """Runs ``request.graph`` eagerly. Autograd, if the graph's ops need it,
    is recorded by PyTorch as usual."""

    def compile(self, request: Request, options: Mapping[str, Any]) -> CompiledFn:
        # under no_grad a detach that only feeds other nodes is a node eager never runs
        graph = request.graph if request.grad_enabled else drop_inert_detaches(request.graph)
        # Note [Transpose pairs], Note [Linear calls]
        rewrites: tuple[Rewrite, ...] = (fold_transpose_pairs, linear_calls)
        if not request.grad_enabled:  # rewrites whose autograd history would not be the graph's
            # Note [Kept dimensions], Note [Movement chains], Note [Copies around a stack]
            rewrites += (keepdim_views, collapse_movement, stack_copies)
        with _use_lazy_graph_module(True):  # Note [Rewritten graphs generate code once]
            graph = rewritten(graph, *rewrites)  # on one copy (Note [One copy for the rewrites])
        stamp(graph)  # the graph it runs (Note [Stamps])
        return _running(graph)


# Note [Rewritten graphs generate code once]: a ``torch.fx.GraphModule``
# generates its Python code when it is made (14 ms on MobileNetV2's
# forward). The module of the rewritten graph (Note [One copy for the
# rewrites]) is one of torch's lazy graph modules instead, whose code is
# generated when first asked for: once, by ``direct_forward``, for the graph
# that runs.


def _running(graph: torch.fx.GraphModule) -> CompiledFn:
    # the graph's own generated code (not nn.Module's call machinery: hooks, which
    # nothing registers on a stage's graph, cost a microsecond or two per call),
    # calling each op's C++ operator directly (Note [Direct op calls])
    run = direct_forward(graph)
    return reducible(run, _running, graph)  # Note [Picklable run-time callables]
