"""The program's facts read from the stage's own trace: one functional run.

Note [One functional run]: the stage needs the program's facts (which inputs
it writes, how its outputs alias: the record's ``analysis``) before it knows
what its functional graph returns, and the record gets them by running the
graph on functional tensors; the trace then runs it so again. That is two
runs where AOTAutograd's inference makes one of metadata and one traced (a
third of a CNN's compile behind dynamo: MobileNetV2's BatchNorm statistics).
So the traced function runs the graph once, hands that run to the record
(``Program.analysis_from``, Note [One functional run] in
``conveyor.analysis.program``) and lays out its outputs by what it read; the
epilogue's plan is built from the same run after the trace.

It applies where the result is the separate analysis's exactly
(:func:`in_one_run`); everywhere else the stage analyses first, as before:

* the record holds the analysis already (a stage before read it): nothing
  to save;
* inputs overlap each other: ``check_no_mutated_aliases`` must refuse a
  write before anything is traced;
* an input has a symbolic layout: the check for written self-overlapping
  inputs (Note [Writes through a self-overlapping input]) would guard on
  its sizes after the trace instead of before it;
* the trace may keep an autograd identity (Note [No-grad writes keep
  autograd identity]: a write under ``no_grad``, or one through a
  ``detach``-ed alias, with grad on): that adds writes of the trace's own,
  which the mutation flags would count. Should the trace keep one anyway, it stops (it never
  reads such a run).

And should anything in the trace or the plan raise, the stage lowers again
the way it did before, so that a program the stage refuses is refused with
the same error, in the same order (analysis, checks, plan, trace): a
failing compile pays for both.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx
from conveyor import Lowering, Request
from conveyor.stage_api import GRAD_META, FunctionalRun, is_view, symbolic_layout, writes, written_positions

from conveyor_functionalize.epilogue import EpiloguePlan
from conveyor_functionalize.layout import FunctionalLayout
from conveyor_functionalize.self_overlap import eager_lowering, written_self_overlapping
from conveyor_functionalize.trace import STAGE, functional_lowering, trace_functional
from conveyor_functionalize.views import no_grad_view_outputs

_DETACH = torch.ops.aten.detach.default


class _NotOneRun(Exception):
    """The trace kept an autograd identity: its run cannot give the facts."""


def in_one_run(request: Request) -> bool:
    """Whether the stage reads the program's facts from its own trace
    (Note [One functional run])."""
    program = request.program
    if program.holds("analysis") or program.aliasing.overlapping:
        return False
    if any(_symbolic(v) for v in request.inputs):
        return False
    return not (request.grad_enabled and _may_keep_identity(request.graph.graph))


def lower_in_one_run(request: Request) -> Lowering | None:
    """The stage's lowering from one functional run; ``None`` when anything
    raised (the caller lowers the way that analyses first)."""
    found: list[tuple[Any, FunctionalLayout]] = []

    def layout_of(run: FunctionalRun, kept_identity: bool) -> FunctionalLayout:
        if kept_identity:
            raise _NotOneRun
        analysis = request.program.analysis_from(run)
        layout = FunctionalLayout.of(analysis.meta)
        found.append((analysis, layout))
        return layout

    try:
        with torch.set_grad_enabled(request.grad_enabled):
            graph = trace_functional(request.graph, request.inputs, request.fake_mode, layout_of)
            analysis, layout = found[-1]
            meta = analysis.meta
            overlapping = written_self_overlapping(request.inputs, [info.mutates_data for info in meta.inputs])
            if overlapping:  # Note [Writes through a self-overlapping input]
                return eager_lowering(request, STAGE, overlapping)
            views = no_grad_view_outputs(request.graph)  # Note [Views taken under no_grad]
            plan = EpiloguePlan.build(meta, analysis.run, layout, request.inputs, request.grad_enabled, views)
    except Exception:  # its own error, raised where lowering analysed first raises it
        return None
    return functional_lowering(request, graph, plan)


def _may_keep_identity(graph: torch.fx.Graph) -> bool:
    """``IdentityKeepingInterpreter`` may write in ``graph`` (grad on): a
    write under ``no_grad``, or one through a ``detach``-ed alias (a
    ``detach`` node or a view of one; a ``detach`` nothing writes through,
    as capture puts after an in-place ``relu_``, keeps nothing)."""
    aliases: set[torch.fx.Node] = set()
    for node in graph.nodes:
        if node.op != "call_function":
            continue
        if writes(node):
            if node.meta.get(GRAD_META, True) is False:
                return True
            for j, name in written_positions(node):
                written = node.args[j] if j < len(node.args) else node.kwargs.get(name)
                if isinstance(written, torch.fx.Node) and written in aliases:
                    return True
        source = node.args[0] if node.args else None
        if node.target is _DETACH or (isinstance(source, torch.fx.Node) and source in aliases and is_view(node)):
            aliases.add(node)
    return False


def _symbolic(value: Any) -> bool:
    if isinstance(value, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        return True
    return isinstance(value, torch.Tensor) and symbolic_layout(value)
