"""Tracing the functional graph inner stages receive.

The traced function runs the request's graph on functional tensors
(``conveyor.analysis.functional_run.run_functional``, with
:class:`~conveyor_functionalize.grad_identity.IdentityKeepingInterpreter`) and returns what :class:`FunctionalLayout` names:
updated inputs, computed user outputs, intermediate bases. ``no_grad``
regions stay visible as ``detach`` nodes, as in capture (a value computed
under ``no_grad`` from an input that requires grad must not carry gradients
in the functional graph either), and the functional ops autograd cannot
differentiate are decomposed (``conveyor_functionalize.decompositions``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.fx
from conveyor import retrace
from conveyor.stage_api import detach_no_grad_results, from_functional, must_keep, run_functional, writes

from conveyor_functionalize.decompositions import DECOMPOSITIONS, keep_eager_kernels
from conveyor_functionalize.grad_identity import IdentityKeepingInterpreter
from conveyor_functionalize.layout import FunctionalLayout


def writing_nodes(graph: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in graph.graph.nodes if n.op == "call_function" and writes(n)]


def _keeping_identity(graph: torch.fx.GraphModule, args: Sequence[Any]) -> Sequence[Any]:
    """Note [No-grad writes keep autograd identity]: the trace also keeps the
    autograd identity of tensors written under ``no_grad``; this adds writes
    of its own, so the record's analysis, which reads mutation flags, runs
    without it."""
    return IdentityKeepingInterpreter(graph).run(*args)  # type: ignore[no-any-return]


def trace_functional(
    graph: torch.fx.GraphModule, inputs: Sequence[Any], fake_mode: Any, layout: FunctionalLayout
) -> torch.fx.GraphModule:
    """The functional graph of ``graph``, with outputs laid out by ``layout``."""
    graph = keep_eager_kernels(graph)  # Note [Python kernels that differ from eager]

    def functional(*args: Any) -> tuple[Any, ...]:
        run = run_functional(graph, args, _keeping_identity)
        outs = [from_functional(run.f_inputs[i]) for i in layout.updated_inputs]
        outs += [from_functional(run.f_outputs[k]) for k in layout.computed_outputs]
        outs += [from_functional(run.f_outputs[k]._base) for k in layout.intermediate_bases]
        return tuple(outs)

    traced = retrace(functional, inputs, fake_mode, decomposition_table=DECOMPOSITIONS)
    graph_module = detach_no_grad_results(traced, tuple(inputs))
    # views the program took only to write through them, or of outputs the
    # epilogue regenerates, are dead once functional
    if graph_module.graph.eliminate_dead_code(is_impure_node=must_keep):
        graph_module.recompile()
    return graph_module
