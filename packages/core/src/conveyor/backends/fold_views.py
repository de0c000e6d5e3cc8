"""Note [Transpose pairs]: the autograd stage's backward transposes a
transposed weight back (``t(t(w))``: the forward's ``t`` feeding ``addmm``
is saved, and ``mm``'s backward transposes it again), and transposes a
weight gradient twice on its way out. ``t`` of ``t`` of a tensor of at most
two dimensions has the sizes, strides and storage offset of the tensor: an
alias eager would not make. :func:`fold_transpose_pairs` lets every reader
of such a pair read the tensor itself. A pair that is a graph output stays
(the caller may tell outputs apart by identity and ``_base``), and a graph
that writes is left as it is (an in-place op on the alias, ``t_`` above
all, must not reach the tensor).
"""

from __future__ import annotations

import copy

import torch
import torch.fx

from conveyor.schema import writes

_T = torch.ops.aten.t.default


def fold_transpose_pairs(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A copy of ``gm`` in which each non-output ``t(t(x))`` is read as ``x``
    (and a ``t`` left without readers is dropped); ``gm`` itself when there is
    none (Note [Transpose pairs])."""
    nodes = gm.graph.nodes
    output = next((n for n in reversed(nodes) if n.op == "output"), None)
    returned = set(output.all_input_nodes) if output is not None else set()
    pairs = [
        n.name
        for n in nodes
        if n.target is _T
        and n.op == "call_function"
        and n not in returned
        and isinstance(n.args[0], torch.fx.Node)
        and n.args[0].op == "call_function"
        and n.args[0].target is _T
    ]
    if not pairs or any(writes(n) for n in nodes if n.op == "call_function"):
        return gm
    graph = copy.deepcopy(gm.graph)
    by_name = {n.name: n for n in graph.nodes}
    for name in pairs:
        outer = by_name[name]
        inner = outer.args[0]
        assert isinstance(inner, torch.fx.Node)
        source = inner.args[0]
        assert isinstance(source, torch.fx.Node)
        outer.replace_all_uses_with(source)
        graph.erase_node(outer)
        if not inner.users:
            graph.erase_node(inner)
    return torch.fx.GraphModule(gm, graph)
