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

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx
from conveyor import Lowering, Request, StageError, retrace
from conveyor.stage_api import (
    FunctionalRun,
    detach_no_grad_results,
    from_functional,
    must_keep,
    run_functional,
    writes,
)

from conveyor_functionalize.decompositions import DECOMPOSITIONS, GRAD_DECOMPOSITIONS, keep_eager_kernels
from conveyor_functionalize.epilogue import EpiloguePlan
from conveyor_functionalize.grad_identity import IdentityKeepingInterpreter
from conveyor_functionalize.layout import FunctionalLayout

STAGE = "functionalize"


def writing_nodes(graph: torch.fx.GraphModule) -> list[torch.fx.Node]:
    return [n for n in graph.graph.nodes if n.op == "call_function" and writes(n)]


def functional_lowering(request: Request, graph: torch.fx.GraphModule, plan: EpiloguePlan) -> Lowering:
    """The inner request on the functional ``graph``, wrapped by ``plan``'s epilogue."""
    left = writing_nodes(graph)
    if left:
        raise StageError(STAGE, f"cannot functionalize {left[0].target}: the traced graph still writes with it")
    plan = plan.with_eager_strides(output_values(request.graph), output_values(graph))
    return Lowering((request.replace(graph=graph),), plan.wrap)


def output_values(graph: torch.fx.GraphModule) -> list[Any]:
    """The values ``graph`` returns, as its trace recorded them."""
    output = next(iter(reversed(graph.graph.nodes)))
    returned = output.args[0] if output.args else ()
    if not isinstance(returned, (tuple, list)):
        returned = (returned,)
    return [a.meta.get("val") if isinstance(a, torch.fx.Node) else a for a in returned]


#: the layout of the traced graph's outputs, from the trace's functional run
#: and whether the trace kept an autograd identity in it (wrote of its own)
LayoutOf = Callable[[FunctionalRun, bool], FunctionalLayout]


class _KeepingIdentity:
    """Note [No-grad writes keep autograd identity]: the trace also keeps the
    autograd identity of tensors written under ``no_grad``; this adds writes
    of its own, so the record's analysis, which reads mutation flags, cannot
    be read from a run that did (``kept_identity``)."""

    kept_identity = False

    def __call__(self, graph: torch.fx.GraphModule, args: Sequence[Any]) -> Sequence[Any]:
        interpreter = IdentityKeepingInterpreter(graph)
        try:
            return interpreter.run(*args)  # type: ignore[no-any-return]
        finally:
            self.kept_identity = interpreter.kept_identity


def trace_functional(
    graph: torch.fx.GraphModule, inputs: Sequence[Any], fake_mode: Any, layout_of: LayoutOf
) -> torch.fx.GraphModule:
    """The functional graph of ``graph``, with outputs laid out by
    ``layout_of`` (called once, on the trace's own functional run)."""
    graph = keep_eager_kernels(graph)  # Note [Python kernels that differ from eager]

    def functional(*args: Any) -> tuple[Any, ...]:
        runner = _KeepingIdentity()
        run = run_functional(graph, args, runner)
        layout = layout_of(run, runner.kept_identity)
        outs = [from_functional(run.f_inputs[i]) for i in layout.updated_inputs]
        outs += [from_functional(run.f_outputs[k]) for k in layout.computed_outputs]
        outs += [from_functional(run.f_outputs[k]._base) for k in layout.intermediate_bases]
        return tuple(outs)

    needs_grad = torch.is_grad_enabled() and any(isinstance(t, torch.Tensor) and t.requires_grad for t in inputs)
    table = GRAD_DECOMPOSITIONS if needs_grad else DECOMPOSITIONS  # Note [Complex scatters under grad]
    traced = retrace(functional, inputs, fake_mode, decomposition_table=table)
    graph_module = detach_no_grad_results(traced, tuple(inputs))
    # views the program took only to write through them, or of outputs the
    # epilogue regenerates, are dead once functional
    if graph_module.graph.eliminate_dead_code(is_impure_node=must_keep):
        graph_module.recompile()
    return graph_module
