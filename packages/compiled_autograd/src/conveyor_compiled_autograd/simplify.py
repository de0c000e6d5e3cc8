"""Note [Simplified segments]: a captured backward strings torch's formulas
and conveyor's copied-in graphs together node for node, so it repeats the
engine's own bookkeeping as ops, which the eager backend then calls one by
one from Python. Before a segment graph that writes nothing goes through the
pipeline, two rewrites remove such work; each gives the same values with the
same sizes, strides and dtype:

* ``t(t(x))`` is ``x`` (a weight's transpose, transposed back by the next
  formula);
* the gradient of a tensor split by ``select`` along one dimension, summed
  from one ``select_backward`` per index (each a zero-filled buffer of the
  whole tensor with one slice written, added up pairwise: what the engine's
  input buffer does), is ``stack`` of the slices' gradients in index order:
  one write of each slice instead of a fill, a copy and an add of the whole.
  Only when the ``select_backward``s cover every index once and nothing else
  reads them or the partial sums.
"""

from __future__ import annotations

import torch
import torch.fx

aten = torch.ops.aten


def simplify(gm: torch.fx.GraphModule) -> int:
    """Rewrite ``gm`` in place (see the Note); how many nodes it rewrote."""
    graph = gm.graph
    changed = 0
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        if node.target is aten.t.default and _is_call(node.args[0], aten.t.default) and len(node.args[0].users) == 1:
            inner = node.args[0]
            node.replace_all_uses_with(inner.args[0])
            graph.erase_node(node)
            graph.erase_node(inner)
            changed += 1
        elif node.target is aten.add.Tensor and not node.kwargs and len(node.args) == 2:
            changed += _stack_select_backwards(graph, node)
    if changed:
        graph.lint()
        gm.recompile()
    return changed


def _is_call(value: object, target: object) -> bool:
    return isinstance(value, torch.fx.Node) and value.op == "call_function" and value.target is target


def _stack_select_backwards(graph: torch.fx.Graph, root: torch.fx.Node) -> int:
    """``add(add(select_backward(g1, S, d, 1), select_backward(g0, S, d, 0)), ...)``
    over every index of dimension ``d`` becomes ``stack([g0, g1, ...], d)``."""
    adds: list[torch.fx.Node] = []
    leaves: list[torch.fx.Node] = []
    todo = [root]
    while todo:
        n = todo.pop()
        if n is not root and len(n.users) != 1:
            return 0
        if n.target is aten.add.Tensor and not n.kwargs and len(n.args) == 2 and all(isinstance(a, torch.fx.Node) for a in n.args):
            adds.append(n)
            todo.extend(n.args)  # type: ignore[arg-type]
        elif _is_call(n, aten.select_backward.default) and not n.kwargs and len(n.args) == 4:
            leaves.append(n)
        else:
            return 0
    if len(leaves) < 2 or len(adds) != len(leaves) - 1 or len(set(leaves)) != len(leaves):
        return 0
    sizes_arg, dim_arg = leaves[0].args[1], leaves[0].args[2]
    if type(dim_arg) is not int or not isinstance(sizes_arg, (list, tuple)) or not all(type(s) is int for s in sizes_arg):
        return 0
    sizes: list[int] = list(sizes_arg)  # type: ignore[arg-type]
    dim = dim_arg % len(sizes)
    by_index: dict[int, torch.fx.Node] = {}
    for leaf in leaves:
        if list(leaf.args[1]) != sizes or leaf.args[2] % len(sizes) != dim or type(leaf.args[3]) is not int:  # type: ignore[arg-type, operator]
            return 0
        by_index[leaf.args[3] % sizes[dim]] = leaf  # type: ignore[operator]
    if sorted(by_index) != list(range(sizes[dim])) or len(by_index) != len(leaves):
        return 0
    val = root.meta.get("val")
    grads = [by_index[i].args[0] for i in range(sizes[dim])]
    if val is not None:
        fakes = [g.meta.get("val") for g in grads]  # type: ignore[union-attr]
        if any(not isinstance(f, torch.Tensor) or f.dtype != val.dtype for f in fakes):
            return 0
    with graph.inserting_before(root):
        stacked = graph.call_function(aten.stack.default, (grads, dim))
    stacked.meta.update(root.meta)
    root.replace_all_uses_with(stacked)
    for n in [*adds, *leaves]:
        graph.erase_node(n)
    return 1
