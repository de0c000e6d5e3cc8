"""A custom op's result that is its mutated argument, spelled as that argument.

Note [Custom ops that return what they mutate]: a custom op may declare that
it returns an argument it writes (``(Tensor(a!) x, Tensor y) -> Tensor(a!)``:
what ``torch.library.custom_op`` infers for an op tagged ``torch.Tag.inplace``
or ``torch.Tag.out``, or a schema written so), and eager hands back that very
tensor (``add_(x, y) is x``). Functionalization records the write of such an
op (``auto_functionalized``) but gives its result a tensor of its own, so a
later write through the result never reached the argument (the caller's
input kept the op's own change only), and a result returned from the program
was a fresh tensor instead of the input (h_sweep5 B2, B3; ``aot_eager`` alike).
So, right after the capture, every use of such a result reads the argument
itself, which is what it is: the graph's uses after the op see the written
value, and the stages know an input when they see one. Only where the
result's layout is the argument's (a kernel that returned a view under an
``a!`` annotation would be another tensor) and for ops outside torch's own
namespaces (whose in-place and out= ops functionalization knows).
"""

from __future__ import annotations

import operator
from typing import Any

import torch
import torch.fx
from torch.fx.experimental.symbolic_shapes import statically_known_true, sym_eq

#: torch's own ops: functionalization replays their in-place and out= results exactly
_TORCH_NAMESPACES = frozenset({"aten", "prims"})


def arguments_for_returns(graph: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``graph`` with each use of a custom op's result that is a mutated
    argument replaced by that argument (in place; recompiled if changed)."""
    changed = False
    for node in list(graph.graph.nodes):
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        if node.target.namespace in _TORCH_NAMESPACES:
            continue
        schema = node.target._schema
        for index, argument in _returned_arguments(schema):
            written = _argument(node, argument, schema)
            if not isinstance(written, torch.fx.Node):
                continue
            for result in _results(node, index, len(schema.returns)):
                if result.users and _same_layout(result, written):
                    result.replace_all_uses_with(written)
                    changed = True
    if changed:
        graph.recompile()
    return graph


def _returned_arguments(schema: Any) -> list[tuple[int, int]]:
    """(return index, argument position) for each ``Tensor(a!)`` return that
    is a ``Tensor(a!)`` argument."""
    pairs = []
    for index, ret in enumerate(schema.returns):
        info = ret.alias_info
        if info is None or not info.is_write or not isinstance(ret.type, torch.TensorType):
            continue
        for position, arg in enumerate(schema.arguments):
            if arg.alias_info is not None and arg.alias_info.before_set == info.before_set:
                if isinstance(arg.type, torch.TensorType):
                    pairs.append((index, position))
                break
    return pairs


def _argument(node: torch.fx.Node, position: int, schema: Any) -> Any:
    arg = schema.arguments[position]
    if not arg.kwarg_only and position < len(node.args):
        return node.args[position]
    return node.kwargs.get(arg.name)


def _results(node: torch.fx.Node, index: int, count: int) -> list[torch.fx.Node]:
    """The nodes that stand for ``node``'s result ``index``."""
    if count == 1:
        return [node]
    return [u for u in node.users if u.target is operator.getitem and u.args[1] == index]


def _same_layout(result: torch.fx.Node, argument: torch.fx.Node) -> bool:
    a, b = result.meta.get("val"), argument.meta.get("val")
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
        return False
    if a.dtype != b.dtype or a.dim() != b.dim():
        return False
    pairs = [*zip(a.shape, b.shape), *zip(a.stride(), b.stride()), (a.storage_offset(), b.storage_offset())]
    return all(statically_known_true(sym_eq(x, y)) for x, y in pairs)  # no guard on symbolic sizes
