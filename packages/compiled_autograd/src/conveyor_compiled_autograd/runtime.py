"""The run-time half: ``CompiledBackward``, what torch's engine calls for one capture.

The engine calls it on every backward that hits the capture, with the
lifted values: ``(inputs, sizes, scalars, hooks, packed_data)``. It runs the
capture's :class:`~conveyor_compiled_autograd.plan.Plan`: plumbing in
Python, each segment through its :class:`SegmentProgram`, opaque nodes
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

import operator
import sys
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx
from conveyor import Pipeline, StageGraph
from torch._dynamo import external_utils

from conveyor_compiled_autograd.accumulate import try_steal
from conveyor_compiled_autograd.callbacks import collecting
from conveyor_compiled_autograd.plan import Plan, plan, run_node
from conveyor_compiled_autograd.program import STAGE, SegmentProgram

HIGHER_ORDER = (
    f"conveyor stage {STAGE!r}: higher-order gradients (create_graph=True) through a backward that "
    "inlined conveyor's compiled backward graphs are not supported (they are compiled without autograd); "
    "run this backward outside conveyor_compiled_autograd.enable(), or compute higher-order gradients eagerly"
)


#: references to a gradient the run time itself holds when it decides to steal it: its env entry,
#: the local variable, getrefcount's argument
_OWN_REFS = 3


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
        self._stub = _final_callbacks_stub()
        self._unwrap = getattr(external_utils, "unwrap_maybe_dynamic_int", None)  # a size, passed as empty(0, n)
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        self._placeholders = placeholders
        # values no later step reads are dropped from the environment after their last step
        last: dict[torch.fx.Node, int] = {}
        for i, (kind, item) in enumerate(self.plan.steps):
            for node in _reads(kind, item):
                last[node] = i
        self._free: list[list[torch.fx.Node]] = [[] for _ in self.plan.steps]
        for node, i in last.items():
            self._free[i].append(node)
        self._keep = set(self.plan.output.all_input_nodes)
        self._stealable = _stealable(self.plan, set(self.programs))
        self._ops = self._prepare()

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
            return self._run(inputs, sizes, scalars, hooks, packed, engine)

    def _run(self, inputs: list[Any], sizes: list[Any], scalars: list[Any], hooks: list[Any], packed: list[Any], engine: Any) -> Any:
        env: dict[torch.fx.Node, Any] = dict(zip(self._placeholders, (inputs, sizes, scalars, hooks, packed), strict=True))
        cleared = False
        stub_ran = False
        fresh: set[torch.fx.Node] = set()
        pop = env.pop
        for op, item, a, b, free in self._ops:  # Note [Prepared steps]
            if op == _GETITEMS:
                env.update(zip(item, b(env[a]), strict=True))
            elif op == _SIZES:
                sizes_now = list(map(env.__getitem__, a))
                if not _INTS.issuperset(map(type, sizes_now)):  # torch's wrapper: empty(0, n) (Note [Sizes as ints])
                    sizes_now = [s.size(1) if isinstance(s, torch.Tensor) else s for s in sizes_now]
                env.update(zip(item, sizes_now, strict=True))
            elif op == _GETITEM:
                env[item] = env[a][b]
            elif op == _PLUMBING:
                env[item] = run_node(item, env, self.gm)
            else:
                if not cleared:  # the lifted inputs are ours now: free activations as they are used
                    inputs.clear()
                    cleared = True
                if op == _SEGMENT:
                    values = list(map(env.__getitem__, item.inputs))
                    outs = a(values)
                    env.update(zip(item.outputs, outs, strict=True))
                    if b:
                        for node, ok in zip(item.outputs, a.fresh(values, outs), strict=True):
                            if ok:
                                fresh.add(node)
                    del values, outs
                elif op == _EAGER_SEGMENT:
                    for node in item.nodes:
                        env[node] = run_node(node, env, self.gm)
                elif op == _STUB:
                    engine.run_pending()  # Note [Queued callbacks]
                    stub_ran = True
                elif op == _STEAL and a[2] in fresh:  # Note [Stealing a fresh gradient]
                    variable, variable_grad, new_grad = env[a[0]], env.get(a[1]), env[a[2]]
                    # held by env, this frame and getrefcount only (as eager checks use_count): nothing else keeps it
                    if sys.getrefcount(new_grad) > _OWN_REFS or not try_steal(variable, variable_grad, new_grad):
                        env[item] = run_node(item, env, self.gm)
                    del variable, variable_grad, new_grad
                else:
                    env[item] = run_node(item, env, self.gm)
            for node in free:
                pop(node, None)
        if not stub_ran:
            engine.run_pending()
        return list(torch.fx.node.map_arg(self.plan.output.args[0], env.__getitem__))  # type: ignore[arg-type]

    def _prepare(self) -> list[tuple[int, Any, Any, Any, tuple[torch.fx.Node, ...]]]:
        """Note [Prepared steps]: the plan's steps as ``(op, item, a, b,
        free)``, decided once per capture rather than on every backward (the
        plumbing alone is hundreds of steps): a ``getitem`` of a value by an
        int, a size, a compiled segment (with its program and whether its
        outputs may be stolen), an accumulation that may steal (with its
        argument nodes), and the values to drop after the step."""
        ops: list[tuple[int, Any, Any, Any, tuple[torch.fx.Node, ...]]] = []
        for (kind, item), free_nodes in zip(self.plan.steps, self._free, strict=True):
            free = tuple(n for n in free_nodes if n not in self._keep)
            if kind == "plumbing":
                args = item.args
                if item.target is operator.getitem and len(args) == 2 and isinstance(args[0], torch.fx.Node) and type(args[1]) is int:
                    ops.append((_GETITEM, item, args[0], args[1], free))
                elif item.target is self._unwrap and len(args) == 1 and isinstance(args[0], torch.fx.Node) and not item.kwargs:
                    ops.append((_SIZES, (item,), (args[0],), None, free))
                else:
                    ops.append((_PLUMBING, item, None, None, free))
            elif kind == "segment":
                program = self.programs.get(id(item))
                if program is None:
                    ops.append((_EAGER_SEGMENT, item, None, None, free))
                else:
                    ops.append((_SEGMENT, item, program, bool(self._stealable), free))
            elif item.op == "call_function" and item.target is self._stub:
                ops.append((_STUB, item, None, None, free))
            elif item in self._stealable and not item.kwargs and isinstance(item.args[0], torch.fx.Node):
                grad = item.args[1]
                # the current gradient: a node, or None (absent from env: env.get gives None)
                ops.append((_STEAL, item, (item.args[0], grad if isinstance(grad, torch.fx.Node) else None, item.args[2]), None, free))
            else:
                ops.append((_OPAQUE, item, None, None, free))
        return _batched(ops)


_INTS = frozenset({int})
_GETITEM, _GETITEMS, _SIZES, _PLUMBING, _SEGMENT, _EAGER_SEGMENT, _STUB, _STEAL, _OPAQUE = range(9)


def _batched(ops: list[tuple[int, Any, Any, Any, tuple[torch.fx.Node, ...]]]) -> list[tuple[int, Any, Any, Any, tuple[torch.fx.Node, ...]]]:
    """Consecutive ``getitem``s of one value become one step (an
    ``itemgetter``), consecutive sizes one step (Note [Prepared steps]);
    what they free is freed after the batch."""
    out: list[tuple[int, Any, Any, Any, tuple[torch.fx.Node, ...]]] = []
    k = 0
    while k < len(ops):
        op, item, a, b, free = ops[k]
        end = k + 1
        if op == _GETITEM:
            while end < len(ops) and ops[end][0] == _GETITEM and ops[end][2] is a:
                end += 1
            if end - k >= 2:
                run = ops[k:end]
                getter = operator.itemgetter(*(r[3] for r in run))
                out.append((_GETITEMS, tuple(r[1] for r in run), a, getter, tuple(n for r in run for n in r[4])))
                k = end
                continue
        elif op == _SIZES:
            while end < len(ops) and ops[end][0] == _SIZES:
                end += 1
            run = ops[k:end]
            nodes = tuple(n for r in run for n in r[1])
            sources = tuple(n for r in run for n in r[2])
            out.append((_SIZES, nodes, sources, None, tuple(n for r in run for n in r[4])))
            k = end
            continue
        out.append(ops[k])
        k += 1
    return out


def _stealable(plan: Plan, compiled: set[int]) -> set[torch.fx.Node]:
    """The accumulations whose new gradient is a compiled segment's output
    read by nothing else (Note [Stealing a fresh gradient])."""
    from torch._dynamo.external_utils import call_accumulate_grad

    produced = {n for s in plan.segments if id(s) in compiled for n in s.outputs}
    out = set()
    for node in plan.opaque:
        if node.target is call_accumulate_grad and len(node.args) == 4:
            grad = node.args[2]
            if isinstance(grad, torch.fx.Node) and grad in produced and len(grad.users) == 1:
                out.add(node)
    return out


def _reads(kind: str, item: Any) -> Sequence[torch.fx.Node]:
    if kind == "segment":
        return [*item.inputs, *item.nodes]
    return list(item.all_input_nodes)
