"""The ``inductor`` backend: conveyor's final functional graph through Inductor.

Note [Symbolic sizes in the inductor backend]: a graph with symbolic sizes
(``conveyor.compile``'s automatic or ``dynamic=True`` sizes, dynamo's
dynamic graphs, compiled autograd's lifted sizes) goes to Inductor as it
is, with the request's fake inputs and so the request's fake mode and
``ShapeEnv``: Inductor detects the fake mode from the inputs, writes
size-generic code (sizes read from the arguments at run time, symbols bound
from them) and records whatever it assumes about a symbol as a guard in that
``ShapeEnv``. Each caller turns the ``ShapeEnv``'s guards into its run-time
check after the pipeline has compiled (``Guards.of`` for ``conveyor.compile``,
dynamo's own guards behind ``torch.compile``, the segment guards of compiled
autograd), so Inductor's assumptions are checked on every call, as under
``torch.compile``. The triton backend specializes instead (Note [Symbolic
sizes in the triton backend]) because its kernel generator needs static
shapes and a new size costs it one cheap lowering; here a new size would
cost a C++ build of seconds, and Inductor needs no static sizes.

The decompositions (Note [Probing Inductor]) are applied by retracing the
received graph under the request's fake mode, as AOTAutograd applies them
for Inductor; the retrace also gives every node the ``meta["val"]``
Inductor lowers from. ``detach`` is left out of the table: the retrace
checks every gradient cut, and Inductor lowers ``detach`` itself.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from typing import Any

import torch
from conveyor import CompiledFn, Request, StageError, stamp
from conveyor.stage_api import call_graph, is_view, reducible, warn_eager, writes
from torch.utils._pytree import tree_leaves

from conveyor_inductor import fx_cache, fx_entry, lowering, program
from conveyor_inductor.offsets import misplaced_input
from conveyor_inductor.probe import STAGE, require_cxx
from conveyor_inductor.specs import describe_inputs


class InductorBackend:
    """Compiles a request's graph with Inductor into an
    :class:`~conveyor_inductor.program.InductorProgram`'s callable.

    It stamps (Note [Stamps] in ``conveyor.protocol.stamps``) the graph it
    handed Inductor, after the decompositions, with the program (its
    generated code) as the stamp's artifact."""

    def compile(self, request: Request, options: Mapping[str, Any]) -> CompiledFn:
        tensors = [t for t in request.inputs if isinstance(t, torch.Tensor)]
        if any(writes(n) for n in request.graph.graph.nodes if n.op == "call_function"):
            raise StageError(
                STAGE,
                "the graph writes to tensors; Inductor's entry takes functional graphs: "
                "enable the functionalize stage (it replays the writes after the compiled graph)",
            )
        if request.grad_enabled and any(t.requires_grad for t in tensors):
            if _views_only(request.graph):  # Note [Graphs of views]
                stamp(request.graph)
                return _running_views(request.graph)
            raise StageError(
                STAGE,
                "inputs require grad, and Inductor's kernels record no autograd history; "
                "enable the autograd stage (it hands this backend separate forward and backward graphs), "
                "or run under torch.no_grad()",
            )
        hop = _higher_order_op(request.graph)
        if hop is not None:  # Note [Higher-order ops in the inductor backend]
            warn_eager(
                f"a {request.label} graph (stage '{STAGE}')",
                f"it holds the higher-order op {hop}, whose branches Inductor lowers only from its own trace "
                "(Note [Higher-order ops in the inductor backend])",
            )
            stamp(request.graph)
            return _running_views(request.graph)
        devices = {t.device.type for t in tensors} or {"cpu"}
        if "cpu" in devices:
            require_cxx()
        config = dict(options.get("config") or {})
        where = fx_cache.scope(request.inputs, request.fake_mode)
        decomposed = lowering.decompose(request.graph, where, config)
        misplaced = misplaced_input(decomposed, where.inputs)
        if misplaced is not None:  # Note [Storage offsets of Inductor's inputs]
            warn_eager(
                f"a {request.label} graph (stage '{STAGE}')",
                f"it addresses input {misplaced}, at a storage offset, with as_strided (or a custom op Inductor "
                "decomposes into one), which this torch's Inductor misplaces (Note [Storage offsets of Inductor's "
                "inputs])",
            )
            stamp(request.graph)
            return _running_views(request.graph)
        gm = program.for_inductor(decomposed)
        described = describe_inputs(request.inputs)
        entry: list[fx_entry.EntryKey] | None = None if described is None else []
        compiled = lowering.compile_decomposed(gm, where, request.label, config, entry=entry)
        made = program.program(request, decomposed, gm, compiled, described, config, entry[0] if entry else None)
        stamp(gm, artifact=made.info)
        return made.run


# Note [Graphs of views]: with the autograd stage off (``disable=["autograd"]``),
# a graph whose only ops are views (or none: functionalize replays output
# views after the graph) reaches this backend with grad enabled and inputs
# requiring grad. Nothing there needs a backward graph: a view's autograd
# history is the view itself. Inductor's kernels would copy where eager
# aliases and record no history, so such a graph runs as it is, each view an
# aten call that records its history (as the triton backend runs one). With
# the autograd stage on, a program with nothing to differentiate arrives
# with grad off instead (Note [Nothing to differentiate] in that stage).
# Note [Higher-order ops in the inductor backend]: ``torch.cond``,
# ``while_loop``, ``map`` and ``scan`` reach this backend as higher-order ops
# whose branches are subgraphs of conveyor's functional graph. Inductor
# lowers them from the subgraphs its own compile traced, and fails on
# conveyor's in several ways (an IndexError or AssertionError in their
# lowering, "NYI: ... is not a graph module" for a constant, mixed fake
# modes: h_sweep4 B11), so such a graph runs as it is, each op an aten call
# (the branches as eager runs them), with a warning. A higher-order op that
# takes no subgraph (``auto_functionalized``, a mutating custom op's functional
# form) is lowered by Inductor from conveyor's graph as from its own, and
# compiles.
def _higher_order_op(gm: torch.fx.GraphModule) -> str | None:
    for n in gm.graph.nodes:
        if n.op == "call_function" and isinstance(n.target, torch._ops.HigherOrderOperator) and _takes_subgraph(gm, n):
            return str(n.target.name())
    return None


def _takes_subgraph(gm: torch.fx.GraphModule, node: torch.fx.Node) -> bool:
    for arg in tree_leaves((node.args, node.kwargs)):
        if isinstance(arg, torch.fx.Node) and arg.op == "get_attr":
            if isinstance(operator.attrgetter(str(arg.target))(gm), torch.nn.Module):
                return True
    return False


def _views_only(gm: torch.fx.GraphModule) -> bool:
    return all(n.target is operator.getitem or is_view(n) for n in gm.graph.nodes if n.op == "call_function")


def _running_views(gm: torch.fx.GraphModule) -> CompiledFn:
    def run(args: list[Any]) -> Sequence[Any]:
        return call_graph(gm, args)

    return reducible(run, _running_views, gm)
