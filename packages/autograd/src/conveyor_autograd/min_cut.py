"""The recompute-aware min-cut partitioner.

As PyTorch's partitioner does (``torch/_functorch/partitioners.py``, learned
from, not called), the choice of what to save is a minimum s-t cut in a flow
network built from the joint graph:

* each value ``v`` is an edge ``v.in -> v.out`` whose capacity is what saving
  ``v`` costs (its bytes; views and tuples cannot be saved: infinite);
* ``v.out -> u.in`` (infinite) for each user ``u``: a value recomputed in the
  backward needs its inputs there;
* ``source -> v.in`` (infinite) for primals and for values that must not be
  recomputed (random ops, matmuls, normalizations, big reductions; see
  ``ops.py``): they are only ever computed in the forward;
* ``v.in -> sink`` (infinite) for values that depend on a tangent, and
  ``v.out -> sink`` for the gradients: they live in the backward.

The cut edges are the saved values; everything on the sink side that the
backward needs is recomputed there from them.
"""

from __future__ import annotations

import math

import networkx as nx
import torch
import torch.fx
from conveyor import StageError, stage_api

from conveyor_autograd.joint import STAGE, JointGraph
from conveyor_autograd.ops import is_recomputable, is_view, size_in_bytes
from conveyor_autograd.partition import ancestors

SOURCE, SINK = "source", "sink"


def _cost(node: torch.fx.Node) -> float:
    val = node.meta.get("val")
    if isinstance(val, (tuple, list)) or (node.op == "call_function" and is_view(node)):
        return math.inf  # save the items / the viewed value instead
    return float(size_in_bytes(node))


def _tangent_dependent(joint: JointGraph) -> set[torch.fx.Node]:
    out: set[torch.fx.Node] = set(joint.tangents)
    for node in joint.gm.graph.nodes:
        if any(a in out for a in node.all_input_nodes):
            out.add(node)
    return out


#: the op that runs a custom Function's backward on the application its forward kept
_FUNCTION_BACKWARD = stage_api.FUNCTION_BACKWARD_OP


def _kept_by_records(joint: JointGraph) -> set[torch.fx.Node]:
    """Note [Keeping a record's tensors]: a custom Function applied in the
    program runs once per call with its own ``ctx``, kept for its backward
    at run time (Note [A Function's backward at run time] in the core's
    ``conveyor.frontend.function_records``); that ``ctx`` may hold its
    inputs and outputs, memory a fusing backend would otherwise reuse once
    the forward no longer reads it. So the values ``conveyor::function_backward``
    reads (through views: their bases) are saved, never recomputed."""
    kept: set[torch.fx.Node] = set()
    for node in joint.gm.graph.nodes:
        target = node.target
        if isinstance(target, torch._ops.OpOverload) and target.name() == _FUNCTION_BACKWARD:
            for arg in node.all_input_nodes:
                while arg.op == "call_function" and is_view(arg) and arg.all_input_nodes:
                    arg = arg.all_input_nodes[0]
                kept.add(arg)
    return kept


def min_cut(joint: JointGraph) -> list[torch.fx.Node]:
    """The cheapest set of values to save (see the module docstring)."""
    relevant = ancestors([*(o for o in joint.outputs if isinstance(o, torch.fx.Node)), *joint.grads])
    backward_only = _tangent_dependent(joint)
    kept = _kept_by_records(joint)
    grads = set(joint.grads)
    net = nx.DiGraph()
    for node in joint.gm.graph.nodes:
        if node not in relevant:
            continue
        if node in backward_only:
            net.add_edge((node, "in"), SINK, capacity=math.inf)
            continue
        if node.op == "get_attr":  # a constant: free to take on either side, never saved
            pass
        elif node.op == "placeholder" or not is_recomputable(node) or node in kept:
            net.add_edge(SOURCE, (node, "in"), capacity=math.inf)
        net.add_edge((node, "in"), (node, "out"), capacity=_cost(node))
        for user in node.users:
            if user in relevant:
                net.add_edge((node, "out"), (user, "in"), capacity=math.inf)
        if node in grads:
            net.add_edge((node, "out"), SINK, capacity=math.inf)
    if SINK not in net or SOURCE not in net:
        return []
    value, (reachable, _) = nx.minimum_cut(net, SOURCE, SINK)
    if math.isinf(value):
        raise StageError(STAGE, "min_cut partitioner: no finite set of values separates forward from backward")
    return [
        node
        for node in joint.gm.graph.nodes
        if (node, "in") in reachable and (node, "out") in net and (node, "out") not in reachable
    ]
