"""Splitting a joint graph into a forward and a backward graph.

A partitioner only chooses *what is saved*: a set of joint-graph values that
the forward graph returns besides the user outputs and the backward graph
takes instead of recomputing them. :func:`split` builds both graphs from
that choice (the forward graph computes every ancestor of the user outputs and
of the saved values; the backward graph computes every ancestor of the
gradients, starting from the saved values and the tangents).

Two partitioners:

* :func:`save_eager`: save the forward values the backward formulas read
  (Note [Forward phase] in ``joint.py``), what eager autograd saves;
* ``min_cut`` (``min_cut.py``): save the cheapest set that separates the
  forward from the backward, recomputing cheap chains in the backward.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
from conveyor import StageError
from torch.fx._lazy_graph_module import _make_graph_module

from conveyor_autograd.joint import STAGE, JointGraph
from conveyor_autograd.layout import AutogradLayout
from conveyor_autograd.ops import is_effectful, is_random

Partitioner = Callable[[JointGraph], Sequence[torch.fx.Node]]


@dataclass(frozen=True)
class Split:
    """The two graphs and the layout that connects them.

    :ivar saved: the saved joint values, in :data:`SavedIdx` order (tensors,
        then symbols), for introspection and tests.
    """

    forward: torch.fx.GraphModule
    backward: torch.fx.GraphModule
    layout: AutogradLayout
    saved: tuple[torch.fx.Node, ...]

    def __post_init__(self) -> None:
        if len(self.saved) != self.layout.num_saved:
            raise ValueError(f"Split: {len(self.saved)} saved values, layout says {self.layout.num_saved}")


def ancestors(roots: Iterable[torch.fx.Node], stop: frozenset[torch.fx.Node] = frozenset()) -> set[torch.fx.Node]:
    """``roots`` and every node they depend on, not looking past ``stop``."""
    seen: set[torch.fx.Node] = set()
    todo = [r for r in roots if isinstance(r, torch.fx.Node)]
    while todo:
        node = todo.pop()
        if node in seen:
            continue
        seen.add(node)
        if node not in stop:
            todo.extend(node.all_input_nodes)
    return seen


_DETACH = torch.ops.aten.detach.default


def save_eager(joint: JointGraph) -> list[torch.fx.Node]:
    """Save what eager autograd saves: every forward value a backward node
    reads (of a forward ``detach``, its source: Note [Detaches of saved outputs])."""
    needed = ancestors(joint.grads)
    saved: dict[torch.fx.Node, None] = {}
    for node in joint.gm.graph.nodes:
        if joint.is_forward(node) and any(u in needed and not joint.is_forward(u) for u in node.users):
            saved[_undetached(joint, node)] = None
    return list(saved)


def _undetached(joint: JointGraph, node: torch.fx.Node) -> torch.fx.Node:
    """Note [Detaches of saved outputs]: autograd detaches an op's output
    when it saves it for that op's backward (``relu``'s, ``sigmoid``'s), so
    the joint trace records ``detach(relu)`` in the forward phase, read by
    the backward. Saving that detach would make the forward return an
    alias of the output it saves anyway; the partition saves the source
    and the backward takes the (free) detach again, as min_cut does for
    every view."""
    while node.target is _DETACH and isinstance(node.args[0], torch.fx.Node) and joint.is_forward(node.args[0]):
        node = node.args[0]
    return node


def _is_tensor(node: torch.fx.Node) -> bool:
    return isinstance(node.meta.get("val"), torch.Tensor)


def split(joint: JointGraph, saved: Sequence[torch.fx.Node]) -> Split:
    """Build the forward and backward graphs that save ``saved``."""
    for node in saved:
        val = node.meta.get("val")
        if isinstance(val, (tuple, list)):
            raise StageError(STAGE, f"the partitioner chose to save {node.format_node()}, a tuple; save its items")
    order = {node: i for i, node in enumerate(joint.gm.graph.nodes)}
    unique = sorted(set(saved), key=order.__getitem__)
    tensors = [n for n in unique if _is_tensor(n)]
    symbols = [n for n in unique if not _is_tensor(n)]
    saved_order = (*tensors, *symbols)
    layout = AutogradLayout(
        num_inputs=len(joint.primals),
        num_outputs=len(joint.outputs),
        grad_inputs=joint.grad_inputs,
        diff_outputs=joint.diff_outputs,
        non_differentiable=joint.non_differentiable,
        num_saved_tensors=len(tensors),
        num_saved_symbols=len(symbols),
    )
    # random ops advance the RNG as in eager; effectful ones (error checks) must raise as in eager
    kept = [n for n in joint.gm.graph.nodes if joint.is_forward(n) and (is_random(n) or is_effectful(n))]
    forward = _subgraph(joint, joint.primals, [*joint.outputs, *saved_order], keep=kept)
    backward = _subgraph(joint, (*saved_order, *joint.tangents), joint.grads, keep=(), drop_detaches=True)
    return Split(forward, backward, layout, saved_order)


def _subgraph(
    joint: JointGraph,
    inputs: Sequence[torch.fx.Node],
    results: Sequence[Any],
    keep: Sequence[torch.fx.Node],
    drop_detaches: bool = False,
) -> torch.fx.GraphModule:
    """A graph with ``inputs`` as placeholders that computes ``results``
    (nodes or constants) with the joint graph's nodes between them. ``keep``
    nodes are computed even when unused (random ops: they advance the RNG as
    in eager; effectful ops: they raise as in eager).

    Note [Detaches in the backward graph]: with ``drop_detaches``, a
    ``detach`` that is not a result is left out, its users reading its
    source (autograd's detach of each saved output it unpacks, Note
    [Detaches of saved outputs]). The backward graph runs under ``no_grad``
    (its request has grad off) and writes nothing (the joint graph is
    functional), where such a detach changes no value, no aliasing and no
    autograd state: the eager backend drops them too
    (``drop_inert_detaches``), by copying the whole graph."""
    boundary = frozenset(inputs)
    returned = frozenset(r for r in results if isinstance(r, torch.fx.Node))
    needed = ancestors([*(r for r in results if isinstance(r, torch.fx.Node)), *keep], stop=boundary)
    graph = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    for node in inputs:
        env[node] = graph.placeholder(node.name)
        env[node].meta = dict(node.meta)
    for node in joint.gm.graph.nodes:
        if node not in needed or node in env:
            continue
        if drop_detaches and node.target is _DETACH and node not in returned:  # Note [Detaches in the backward graph]
            env[node] = env[node.args[0]]  # type: ignore[index]
            continue
        if node.op not in ("call_function", "get_attr"):  # get_attr: a constant of the joint graph (copied along)
            raise StageError(STAGE, f"partition: {node.format_node()} is needed but is neither computed nor given")
        env[node] = graph.node_copy(node, env.__getitem__)
    graph.output(tuple(env[r] if isinstance(r, torch.fx.Node) else r for r in results))
    return _make_graph_module(joint.gm, graph)  # lazy in the stage (Note [Graphs nobody runs])
