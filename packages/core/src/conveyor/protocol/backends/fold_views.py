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

Note [Linear calls]: capture decomposes ``F.linear`` of a matrix into
``addmm(bias, x, t(w))`` (``mm(x, t(w))`` without a bias): two ops where
eager ran one. ATen's ``linear`` is exactly that composition, done in C++
(``at::addmm(bias, input, weight.t())``, ``at::matmul(input, weight.t())``),
so :func:`linear_calls` gives it back its one call: the same kernels, the
same result bit for bit, and under grad the same autograd nodes, one Python
call fewer per layer. Only a ``t`` that nothing else reads is folded in.

Note [Kept dimensions]: a bias gradient is ``view(sum(g, [0], True), [n])``:
the sum keeps the reduced dimension and a view drops it. ``sum(g, [0])``
runs the same reduction into the same contiguous values without it, so
:func:`keepdim_views` gives such a view its one call, where the view is the
sum's only reader and its shape is the sum's without the reduced dimensions.
"""

from __future__ import annotations

import torch
import torch.fx

from conveyor.analysis.schema import writes
from conveyor.protocol.backends.rewriting import Rewriting

_T = torch.ops.aten.t.default
_ADDMM = torch.ops.aten.addmm.default
_MM = torch.ops.aten.mm.default


def fold_transpose_pairs(rewriting: Rewriting) -> None:
    """Each non-output ``t(t(x))`` is read as ``x`` and a ``t`` left without
    readers is dropped (Note [Transpose pairs]), in the graph of
    ``rewriting`` (Note [One copy for the rewrites])."""
    nodes = rewriting.graph.nodes
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
        return
    graph = rewriting.writable()
    by_name = {n.name: n for n in graph.nodes}
    for name in pairs:
        outer = by_name[name]
        inner = outer.args[0]
        assert isinstance(inner, torch.fx.Node)
        if inner.target is not _T:  # a chain t(t(t(x))): its inner pair went first, what is left is one t
            continue
        source = inner.args[0]
        assert isinstance(source, torch.fx.Node)
        outer.replace_all_uses_with(source)
        graph.erase_node(outer)
        if not inner.users:
            graph.erase_node(inner)


def linear_calls(rewriting: Rewriting) -> None:
    """Each ``addmm(b, x, t(w))`` (default ``beta`` and ``alpha``) and
    ``mm(x, t(w))`` of matrices whose ``t`` has no other reader is
    ``linear(x, w, b)`` / ``linear(x, w)`` (Note [Linear calls]), in the graph
    of ``rewriting`` (Note [One copy for the rewrites])."""
    found = [n.name for n in rewriting.graph.nodes if _linear_pattern(n)]
    if not found:
        return
    graph = rewriting.writable()
    by_name = {n.name: n for n in graph.nodes}
    for name in found:
        node = by_name[name]
        *bias, x, transposed = node.args
        weight = transposed.args[0]  # type: ignore[union-attr]
        with graph.inserting_before(node):
            linear = graph.call_function(torch.ops.aten.linear.default, (x, weight, *bias))
        linear.meta = dict(node.meta)
        node.replace_all_uses_with(linear)
        graph.erase_node(node)
        graph.erase_node(transposed)  # type: ignore[arg-type]


def _linear_pattern(node: torch.fx.Node) -> bool:
    if node.op != "call_function" or node.kwargs:
        return False
    if node.target is _ADDMM:
        args = node.args
    elif node.target is _MM:
        args = node.args
    else:
        return False
    transposed = args[-1]
    return (
        len(args) == (3 if node.target is _ADDMM else 2)
        and isinstance(transposed, torch.fx.Node)
        and transposed.op == "call_function"
        and transposed.target is _T
        and len(transposed.users) == 1
        and isinstance(args[-2], torch.fx.Node)
    )


_SUM = torch.ops.aten.sum.dim_IntList
_VIEW = torch.ops.aten.view.default


def keepdim_views(rewriting: Rewriting) -> None:
    """Each ``view(sum(x, dims, True), shape)`` that drops exactly the kept
    dimensions is ``sum(x, dims)`` (Note [Kept dimensions]), in the graph of
    ``rewriting`` (Note [One copy for the rewrites])."""
    found = [n.name for n in rewriting.graph.nodes if _keepdim_pattern(n)]
    if not found:
        return
    graph = rewriting.writable()
    by_name = {n.name: n for n in graph.nodes}
    for name in found:
        view = by_name[name]
        total = view.args[0]
        assert isinstance(total, torch.fx.Node)
        with graph.inserting_before(view):
            dropped = graph.call_function(_SUM, (total.args[0], total.args[1], False), dict(total.kwargs))
        dropped.meta = dict(view.meta)
        view.replace_all_uses_with(dropped)
        graph.erase_node(view)
        graph.erase_node(total)


def _keepdim_pattern(node: torch.fx.Node) -> bool:
    if node.op != "call_function" or node.target is not _VIEW or node.kwargs or len(node.args) != 2:
        return False
    total = node.args[0]
    if not isinstance(total, torch.fx.Node) or total.op != "call_function" or total.target is not _SUM:
        return False
    if len(total.users) != 1 or len(total.args) != 3 or total.args[2] is not True or set(total.kwargs) - {"dtype"}:
        return False
    source, dims = total.args[0], total.args[1]
    val = source.meta.get("val") if isinstance(source, torch.fx.Node) else None
    if not isinstance(val, torch.Tensor) or not isinstance(dims, (list, tuple)) or not dims:
        return False
    if not all(type(d) is int for d in dims) or not all(type(s) is int for s in val.shape):
        return False
    reduced = {d % val.dim() for d in dims}
    if len(reduced) != len(dims):
        return False
    kept = [s for i, s in enumerate(val.shape) if i not in reduced]
    shape = node.args[1]
    return isinstance(shape, (list, tuple)) and list(shape) == kept
