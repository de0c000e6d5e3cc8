"""The run-time half: ``CompiledBackward``, what torch's engine calls for one capture.

The engine calls it on every backward that hits the capture, with the
lifted values: ``(inputs, sizes, scalars, hooks, packed_data)``. It runs the
capture's :class:`~conveyor_compiled_autograd.plan.Plan`, made one Python
function per capture (Note [The backward as one function]): plumbing as
plain Python, each segment through its :class:`SegmentProgram`, opaque nodes
(hooks, foreign Functions, gradient accumulation) as they are, in order.

Gradient accumulation is torch's own functional ``AccumulateGrad``
(``call_accumulate_grad``): an existing ``.grad`` is updated in place, a new
one follows the gradient layout contract, a sparse gradient stays sparse,
and post-accumulate-grad hooks run after it on the accumulated ``.grad``.
``torch.autograd.grad`` captures have no accumulation: the graph returns the
gradients.

Note [Higher-order gradients]: the engine does not key a capture by
``create_graph``; it runs the callable with grad mode on when the user asked
for ``create_graph=True``. The compiled segments are compiled without
autograd, so with grad mode on the capture runs as torch traced it, node by
node (torch's C++ formulas are differentiable). A capture that inlined a
conveyor backward graph cannot: those graphs read the forward's saved values,
which carry no autograd history, so their gradients would differentiate to
wrong values. Such a backward raises :data:`HIGHER_ORDER`.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx
from conveyor import Pipeline, StageGraph
from torch._dynamo import external_utils

from conveyor_compiled_autograd.callbacks import collecting
from conveyor_compiled_autograd.inplace import addable
from conveyor_compiled_autograd.plan import Plan, plan
from conveyor_compiled_autograd.program import STAGE, SegmentProgram
from conveyor_compiled_autograd.straight import ints, straight_line

HIGHER_ORDER = (
    f"conveyor stage {STAGE!r}: higher-order gradients (create_graph=True) through a backward that "
    "inlined conveyor's compiled backward graphs are not supported (they are compiled without autograd); "
    "run this backward outside conveyor_compiled_autograd.enable(), or compute higher-order gradients eagerly"
)


def _final_callbacks_stub() -> Any:
    from torch._dynamo.external_utils import FakeCompiledAutogradEngine

    return getattr(FakeCompiledAutogradEngine, "_exec_final_callbacks_stub", None)


class CompiledBackward:
    """Runs one captured graph (see the module docstring).

    :param gm: the captured graph.
    :param pipeline: compiles its segments.
    :param inlined: how many conveyor backward graphs the capture copied in.
    """

    def __init__(self, gm: torch.fx.GraphModule, pipeline: Pipeline, inlined: int, name: str) -> None:
        self.gm = gm
        self.inlined = inlined
        self.plan: Plan = plan(gm.graph)
        self.programs: dict[int, SegmentProgram] = {}
        for k, seg in enumerate(self.plan.segments):
            if seg.computes:
                self.programs[id(seg)] = SegmentProgram(seg, pipeline, gm, f"{name} segment {k}")
        unwrap = getattr(external_utils, "unwrap_maybe_dynamic_int", None)  # a size, passed as empty(0, n)
        stealable = _stealable(self.plan, set(self.programs))
        # Note [The backward as one function]
        self._run = straight_line(gm, self.plan, self.programs, stealable, unwrap, _final_callbacks_stub(), frozenset(addable(self.plan)))

    @property
    def graphs(self) -> tuple[StageGraph, ...]:
        """The captured graph, then the graph after each stage of each compiled segment."""
        out = [StageGraph(STAGE, "captured backward", self.gm)]
        for program in self.programs.values():
            out.extend(program.graphs)
        return tuple(out)

    @property
    def compiles(self) -> int:
        """Conveyor compilations of this capture's segments so far."""
        return sum(p.compiles for p in self.programs.values())

    def __call__(self, inputs: list[Any], sizes: list[Any], scalars: list[Any], hooks: list[Any], packed: list[Any]) -> Any:
        with collecting() as engine:
            if torch.is_grad_enabled():  # Note [Higher-order gradients]
                if self.inlined:
                    raise RuntimeError(HIGHER_ORDER)
                out = self.gm(inputs, sizes, scalars, hooks, packed)
                engine.run_pending()
                return out
            return self._run(inputs, ints(sizes), scalars, hooks, packed, engine)


def _stealable(plan: Plan, compiled: set[int]) -> set[torch.fx.Node]:
    """The accumulations whose new gradient is a compiled segment's output
    read by nothing else (Note [Stealing a fresh gradient])."""
    from torch._dynamo.external_utils import call_accumulate_grad

    produced = {n for s in plan.segments if id(s) in compiled for n in s.outputs}
    out = set()
    for node in plan.opaque:
        if node.target is call_accumulate_grad and len(node.args) == 4 and not node.kwargs:
            variable, current, grad, _ = node.args
            if current is None and isinstance(variable, torch.fx.Node) and isinstance(grad, torch.fx.Node) and grad in produced and len(grad.users) == 1:
                out.add(node)
    return out
