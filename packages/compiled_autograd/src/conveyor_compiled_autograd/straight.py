"""A captured backward's plan as one generated Python function: :func:`straight_line`.

Note [The backward as one function]: a two-block transformer's captured
backward is about 330 plan steps (a ``getitem`` per lifted tensor and per
size, one segment, an accumulation per parameter). Interpreting them on
every backward (a dict from node to value, a dispatch on each step's kind,
the values to drop after each step popped one by one) cost about 0.15 ms
per backward, a twelfth of eager's whole backward. So the plan becomes one
FX graph once per capture, and FX's code generation makes it a function
with a local per value, dropped (``x = None``) right after its last reader:

* its placeholders are the capture's five (``inputs, sizes, scalars, hooks,
  packed_data``) and the callbacks' collector (Note [Queued callbacks]);
* a size, ``unwrap_maybe_dynamic_int(sizes[k])``, is ``sizes[k]``: the
  caller passes ints (torch's ``empty(0, n)`` are read first where torch's
  wrapper ran, Note [Sizes as ints]);
* before the first segment or opaque step, ``inputs.clear()`` (the lifted
  inputs are ours: activations are freed as they are used, as before);
* a compiled segment is one call of its :class:`SegmentProgram` on a list
  of its inputs, made right before the call and given away (the inputs no
  later step reads are dropped before the call: Note [Inputs freed
  early]), then a subscript per output that later steps read;
  a segment that runs node by node is its nodes, copied;
* plumbing and opaque nodes (hooks, foreign Functions, accumulations) are
  copied as they are, in plan order; the final-callbacks stub runs the
  queued callbacks;
* a run of accumulations that may steal (Note [Stealing a fresh gradient])
  is one call of :class:`Accumulations`, and a run of accumulations into
  current gradients one call of :class:`InPlaceAccumulations` (Note
  [Gradients added in place at once]), in graph order.

The order of the steps, what each computes and when a value is released
are the plan's (FX drops a value after its last reader, as the plan's free
lists did).
"""

from __future__ import annotations

import functools
import operator
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.fx

from conveyor_compiled_autograd.accumulate import Accumulations
from conveyor_compiled_autograd.inplace import InPlaceAccumulations
from conveyor_compiled_autograd.plan import Plan


def straight_line(
    gm: torch.fx.GraphModule,
    plan: Plan,
    programs: dict[int, Any],
    stealable: set[torch.fx.Node],
    unwrap: Any,
    stub: Any,
    addable: frozenset[torch.fx.Node] = frozenset(),
) -> Callable[..., Any]:
    """``(inputs, sizes, scalars, hooks, packed, collector) -> outputs``,
    running ``plan`` (Note [The backward as one function]). ``programs``:
    the compiled segments by ``id``; ``stealable``: the accumulations that
    may steal; ``unwrap``, ``stub``: torch's size unwrapper and
    final-callbacks stub (or ``None``); ``addable``: the accumulations into
    a current gradient (Note [Gradients added in place at once])."""
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, Any] = {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node in placeholders:
        env[node] = graph.placeholder(node.name)
    collector = graph.placeholder("conveyor_collector")
    sizes = placeholders[1] if len(placeholders) > 1 else None
    fresh: dict[torch.fx.Node, torch.fx.Node] = {}  # a segment output -> whether it is fresh
    cleared = False
    pending: list[torch.fx.Node] = []  # a run of stealing accumulations not yet emitted
    adding: list[torch.fx.Node] = []  # a run of in-place accumulations not yet emitted

    def flush() -> None:
        if pending:
            args = [(env[a.args[0]], env[a.args[2]], fresh[a.args[2]]) for a in pending]  # type: ignore[index]
            run = Accumulations([a.target for a in pending], [a.args[3] for a in pending], own_references())
            graph.call_function(run, ([v for triple in args for v in triple],))
            pending.clear()
        if adding:  # Note [Gradients added in place at once]
            values = [env[v] for a in adding for v in a.args[:3]]  # type: ignore[index]
            graph.call_function(InPlaceAccumulations([a.target for a in adding]), (values,))
            adding.clear()

    for kind, item in plan.steps:
        steals = kind == "opaque" and item in stealable
        adds = kind == "opaque" and item in addable
        if not ((steals and not adding) or (adds and not pending)):  # a step that ends the run (order kept)
            flush()
        if kind == "plumbing":
            source = item.args[0] if item.args else None
            if unwrap is not None and item.target is unwrap and isinstance(source, torch.fx.Node) and _is_size(source, sizes) and not item.kwargs:
                env[item] = env[source]  # an int already (see the Note)
            else:
                env[item] = graph.node_copy(item, env.__getitem__)
            continue
        if not cleared:
            graph.call_function(_clear, (env[placeholders[0]],))
            cleared = True
        if kind == "segment":
            program = programs.get(id(item))
            if program is None:  # runs node by node
                for node in item.nodes:
                    env[node] = graph.node_copy(node, env.__getitem__)
                continue
            steal = [n for n in item.outputs if any(u in stealable for u in n.users)]
            values = graph.call_function(list, (tuple(env[n] for n in item.inputs),))  # Note [Inputs freed early]
            call = graph.call_function(_SegmentCall(program, [item.outputs.index(n) for n in steal]), (values,))
            for j, node in enumerate(item.outputs):
                env[node] = graph.call_function(operator.getitem, (call, j))
            for j, node in enumerate(steal):
                fresh[node] = graph.call_function(operator.getitem, (call, len(item.outputs) + j))
        elif stub is not None and item.op == "call_function" and item.target is stub:
            graph.call_function(_run_pending, (collector,))
        elif item in stealable:
            pending.append(item)
        elif item in addable:
            adding.append(item)
        else:
            env[item] = graph.node_copy(item, env.__getitem__)
    flush()
    graph.output(torch.fx.node.map_arg(plan.output.args[0], env.__getitem__))
    module = torch.fx.GraphModule(gm, graph, "ConveyorBackward")
    return module.forward


def _is_size(node: torch.fx.Node, sizes: torch.fx.Node | None) -> bool:
    """``sizes[k]``, an int index."""
    return (
        node.op == "call_function"
        and node.target is operator.getitem
        and node.args[0] is sizes
        and type(node.args[1]) is int
    )


class _SegmentCall:
    """A compiled segment's outputs, then, for the outputs at ``steal``,
    whether each is fresh (Note [Stealing a fresh gradient])."""

    __name__ = "conveyor_segment"

    def __init__(self, program: Any, steal: list[int]) -> None:
        self.program = program
        self.steal = steal

    def __call__(self, values: list[Any]) -> list[Any]:
        outs = self.program(values, owned=True)  # Note [Inputs freed early]
        if self.steal:
            flags = self.program.fresh(values, outs)
            outs.extend([flags[j] for j in self.steal])
        return outs  # type: ignore[no-any-return]


def _clear(inputs: list[Any]) -> None:
    inputs.clear()


def _run_pending(collector: Any) -> None:
    collector.run_pending()  # Note [Queued callbacks]


def ints(sizes: list[Any]) -> list[Any]:
    """The sizes as ints (Note [Sizes as ints]): ``sizes`` itself when they are."""
    if _INT.issuperset(map(type, sizes)):
        return sizes
    return [s.size(1) if isinstance(s, torch.Tensor) else s for s in sizes]


_INT = frozenset({int})


@functools.cache
def own_references() -> int:
    """What :class:`Accumulations` counts for a gradient that only the
    generated caller holds (Note [Stealing a fresh gradient]), probed
    through FX's generated code in the same shape (subscripts of a
    segment's result, then the call), a few times over: 0 (nothing is
    stolen) where the counts differ or the probe fails."""
    graph = torch.fx.Graph()
    variable = graph.call_function(torch.empty, (0,))
    outs = graph.call_function(_fresh_values, ())
    args: list[Any] = []
    for j in range(2):
        args.extend((variable, graph.call_function(operator.getitem, (outs, 2 * j)), graph.call_function(operator.getitem, (outs, 2 * j + 1))))
    graph.output(graph.call_function(Accumulations([None] * 2, [False] * 2, -1), (args,)))
    try:
        run = torch.fx.GraphModule(torch.nn.Module(), graph).forward
        counts = {count for _ in range(_PROBES) for count in run()}
    except Exception as exc:  # noqa: BLE001 (a probe: any failure means "do not steal")
        return _no_stealing(f"the probe raised {type(exc).__name__}: {exc}")
    count = next(iter(counts)) if len(counts) == 1 else 0
    if type(count) is int and count > 0:
        return count
    return _no_stealing(f"the probe's reference counts were {sorted(map(repr, counts))}, not one positive count")


def _no_stealing(why: str) -> int:
    """0 (nothing is stolen), said once: never a silent probe."""
    warnings.warn(
        f"conveyor compiled_autograd: fresh gradients will be copied into .grad, not stolen "
        f"(Note [Stealing a fresh gradient]): {why}",
        RuntimeWarning,
        stacklevel=3,
    )
    return 0


#: calls of the probe: enough for the interpreter to specialize the call site
_PROBES = 64


def _fresh_values() -> list[Any]:
    return [torch.empty(0), True, torch.empty(0), True]
