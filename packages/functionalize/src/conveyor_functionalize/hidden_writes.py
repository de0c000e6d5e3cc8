"""A write hidden from autograd to a tensor its backward may read: run eagerly.

Note [Writes hidden from autograd to a saved tensor]: ``x.data.add_(1)``
writes ``x``'s memory through an alias autograd does not know of and that
does not share ``x``'s version counter. When an earlier op saved ``x`` for
its backward (``y = x * x``), eager's backward reads the saved memory, so it
sees the new value, and no "modified by an inplace operation" check fires.
Functionalization makes the write a new value that the earlier op never
saw: the autograd stage differentiates the functional graph, so its backward
reads the old value, a silently different gradient (h_fuzz2's B15;
AOTAutograd differentiates above functionalization and matches eager). No
functional graph holds "the forward reads the old value, the backward the
new one", so such a program runs eagerly, with a warning.

Capture records ``x.data`` as ``aten.detach``, the op ``x.detach()`` records
too; ``x.detach()`` shares the version counter, so the same program with it
raises in eager's backward. The graph cannot tell them apart, so the eager
run reaches the written alias with ``Tensor.data`` (no version counter
shared, :func:`data_aliases`): exact for ``.data``, and for ``.detach()`` the
backward reads the new value where eager raises (the autograd README's known
difference: conveyor does not raise where eager's saved-tensor check does).

The rule is conservative: a write, recorded under grad mode through a
``detach`` alias, to a value an earlier op recorded under grad mode read
through no ``detach`` (the op may have saved it), while an input requires
grad. A write under ``no_grad`` bumps the version counter in eager, whose
backward then raises; it is left to functionalization as before.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.fx
from conveyor.stage_api import GRAD_META, is_view, swaps_storage, written_positions

REASON = (
    "it writes, through a .data or detach() alias, a tensor an earlier op may have saved for its backward: eager's "
    "backward reads the new value, a functional graph's the old (Note [Writes hidden from autograd to a saved tensor])"
)
_DETACH = torch.ops.aten.detach.default


def hidden_write_detaches(graph: torch.fx.GraphModule, inputs: Sequence[Any], grad_enabled: bool) -> list[torch.fx.Node]:
    """The ``detach`` nodes through which ``graph`` writes, hidden from
    autograd, a value an earlier grad-mode op read (Note [Writes hidden from
    autograd to a saved tensor]); empty when there is none."""
    if not grad_enabled or not any(isinstance(t, torch.Tensor) and t.requires_grad for t in inputs):
        return []
    read: set[torch.fx.Node] = set()  # roots an earlier grad-mode op read through no detach
    found: list[torch.fx.Node] = []
    for node in graph.graph.nodes:
        if node.op != "call_function" or not node.meta.get(GRAD_META, True):
            continue
        positions = {pos for pos, _ in written_positions(node)}
        for pos, arg in enumerate(node.args):
            if not isinstance(arg, torch.fx.Node):
                continue
            root, detaches = _root(arg)
            if pos in positions:
                if detaches and root in read:
                    found.extend(d for d in detaches if d not in found)
            elif not detaches and not is_view(node):
                read.add(root)
    return found


def _root(node: torch.fx.Node) -> tuple[Any, list[torch.fx.Node]]:
    """The value ``node`` aliases (past views and in-place ops, which return
    the tensor they write), and the ``detach`` nodes on the way."""
    detaches: list[torch.fx.Node] = []
    current: Any = node
    while isinstance(current, torch.fx.Node) and current.op == "call_function" and current.args:
        if current.target is _DETACH:
            detaches.append(current)
        elif not (is_view(current) or ((0, "self") in written_positions(current) and not swaps_storage(current))):
            break
        current = current.args[0]
    return current, detaches


def _data(t: torch.Tensor) -> torch.Tensor:
    """``t.data``: an alias of ``t`` that autograd does not see and that has
    a version counter of its own."""
    return t.data


def data_aliases(graph: torch.fx.GraphModule, detaches: Sequence[torch.fx.Node]) -> torch.fx.GraphModule:
    """A copy of ``graph`` with each of ``detaches`` (nodes of ``graph``)
    computed as ``Tensor.data`` (Note [Writes hidden from autograd to a
    saved tensor])."""
    names = {d.name for d in detaches}
    copy = torch.fx.GraphModule(graph, _copied(graph.graph))
    for node in copy.graph.nodes:
        if node.name in names:
            node.target = _data
    copy.recompile()
    return copy


def _copied(graph: torch.fx.Graph) -> torch.fx.Graph:
    new = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    out = new.graph_copy(graph, env)
    new.output(out)
    return new
