"""Note [Copies around a stack]: the backward of a tensor split into equal
parts (an attention in-projection's q, k and v) stacks the parts'
gradients, each copied contiguous first, and then moves the stacked
dimension inwards and copies again (``stack, unsqueeze, transpose, squeeze,
clone, _unsafe_view``). ``stack`` writes a new tensor whatever the layout
of its parts, and stacking along the inner dimension directly writes the
elements where the second copy would put them. :func:`stack_copies`
rewrites, with the same values, sizes and strides:

* a contiguous ``clone`` that only a ``stack`` or ``cat`` reads: the stack
  reads the clone's input (one copy fewer), when the stack's output layout,
  computed on meta tensors, stays the one recorded;
* a chain of movement ops with a copy that reads a ``stack`` alone, whose
  value is ``stack`` along another dimension viewed to its shape (checked on
  the storage positions of the stacked tensor): that stack, and a view.

Static shapes only; a graph that writes is left as it is.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx

from conveyor.analysis.schema import writes
from conveyor.protocol.backends.movement import (
    CLONE,
    chain_of,
    contiguous_strides,
    is_movement,
    restride,
    static_layout,
    static_values,
)
from conveyor.protocol.backends.rewriting import Rewriting

aten = torch.ops.aten
_STACKS = (aten.stack.default, aten.cat.default)


def _meta(node: Any) -> torch.Tensor | None:
    if not isinstance(node, torch.fx.Node):
        return None
    layout = static_layout(node)
    if layout is None:
        return None
    val = node.meta["val"]
    return torch.empty_strided(layout[0], layout[1], dtype=val.dtype, device="meta")


def _same_layout(node: torch.fx.Node, metas: list[torch.Tensor | None], dim: int) -> bool:
    """``node`` (a stack or cat) on parts laid out as ``metas`` has the layout it recorded."""
    want = static_layout(node)
    if want is None or any(m is None for m in metas):
        return False
    out = node.target(metas, dim)  # type: ignore[operator]
    return (tuple(out.shape), tuple(out.stride())) == want[:2]


def _uncopied(part: Any, stack: torch.fx.Node, returned: set[torch.fx.Node]) -> torch.Tensor | None:
    """The layout ``part`` would have without its copy, if it is a copy only
    ``stack`` reads: a contiguous ``clone``, or a collapsed chain that copies
    (Note [Movement chains])."""
    if (
        not isinstance(part, torch.fx.Node)
        or part.op != "call_function"
        or len(part.users) != 1
        or part in returned
        or list(stack.args[0]).count(part) != 1  # type: ignore[arg-type]
    ):
        return None
    if part.target is CLONE and part.kwargs.get("memory_format", torch.contiguous_format) is torch.contiguous_format:
        return _meta(part.args[0])
    if part.target is restride and part.args[5] is True:
        val = part.meta.get("val")
        if isinstance(val, torch.Tensor):
            return torch.empty_strided(part.args[1], part.args[2], dtype=val.dtype, device="meta")  # type: ignore[arg-type]
    return None


def _dim(node: torch.fx.Node) -> int | None:
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
    return dim if type(dim) is int else None


def _restack(chain: list[torch.fx.Node], stack: torch.fx.Node) -> int | None:
    """The dimension to stack along so that the chain's last value is that
    stack viewed to its shape, or ``None``."""
    dim, last, layout = _dim(stack), static_layout(chain[-1]), static_layout(stack)
    if dim is None or last is None or layout is None or not any(n.target is CLONE for n in chain):
        return None
    if layout[1] != contiguous_strides(layout[0]) or last[1] != contiguous_strides(last[0]) or last[2] != 0:
        return None
    positions = torch.arange(max(1, torch.Size(layout[0]).numel())).view(layout[0])
    try:
        for node in chain:
            if not static_values(node.args[1:]) or not all(static_values(v) for v in node.kwargs.values()):
                return None
            positions = node.target(positions, *node.args[1:], **node.kwargs)  # type: ignore[operator]
    except RuntimeError:
        return None
    flat = positions.reshape(-1)
    if flat.numel() != torch.Size(layout[0]).numel():
        return None  # the chain repeats or drops elements (an expand): no view of the stack
    stacked = torch.arange(flat.numel()).view(layout[0])
    dim %= len(layout[0])
    for new in range(len(layout[0])):
        if new != dim and torch.equal(stacked.movedim(dim, new).reshape(-1), flat):
            return new
    return None


def stack_copies(rewriting: Rewriting) -> None:
    """The copies of Note [Copies around a stack] removed from the graph of
    ``rewriting`` (Note [One copy for the rewrites])."""
    nodes = rewriting.graph.nodes
    if any(writes(n) for n in nodes if n.op == "call_function"):
        return
    output = next((n for n in reversed(nodes) if n.op == "output"), None)
    returned = set(output.all_input_nodes) if output is not None else set()
    parts: list[tuple[str, str]] = []  # (clone, stack)
    restacks: list[tuple[list[str], str, int]] = []
    for node in nodes:
        if node.op != "call_function":
            continue
        if node.target in _STACKS and node not in returned and isinstance(node.args[0], (list, tuple)):
            dim = _dim(node)
            inputs = list(node.args[0])
            uncopied = [_uncopied(p, node, returned) for p in inputs]
            metas = [m if m is not None else _meta(p) for p, m in zip(inputs, uncopied, strict=True)]
            if dim is not None and any(m is not None for m in uncopied) and _same_layout(node, metas, dim):
                parts.extend((p.name, node.name) for p, m in zip(inputs, uncopied, strict=True) if m is not None)  # type: ignore[union-attr]
        if node.target is aten.stack.default and len(node.users) == 1 and node not in returned:
            (reader,) = node.users
            end = reader
            while len(end.users) == 1 and is_movement(next(iter(end.users))):
                end = next(iter(end.users))
            if is_movement(reader) and (end in returned or not all(is_movement(u) for u in end.users)):
                chain = chain_of(end)
                if chain[0] is reader and len(chain) >= 2:
                    new = _restack(chain, node)
                    if new is not None:
                        restacks.append(([n.name for n in chain], node.name, new))
    if not parts and not restacks:
        return
    graph = rewriting.writable()
    by_name = {n.name: n for n in graph.nodes}
    for copy_name, stack_name in parts:
        part, stack = by_name[copy_name], by_name[stack_name]
        if part.target is restride:  # the chain's view, without its copy
            part.args = (*part.args[:5], False, *part.args[6:])
            val = part.meta["val"]
            part.meta["val"] = torch.empty_strided(part.args[1], part.args[2], dtype=val.dtype, device="meta")  # type: ignore[arg-type]
            continue
        source = part.args[0]
        stack.args = ([source if p is part else p for p in stack.args[0]], *stack.args[1:])  # type: ignore[union-attr]
        graph.erase_node(part)
    for names, stack_name, new in restacks:
        chain, stack = [by_name[n] for n in names], by_name[stack_name]
        end = chain[-1]
        metas = [_meta(p) for p in stack.args[0]]  # type: ignore[union-attr]
        if any(m is None for m in metas):
            continue
        out = torch.stack(metas, new)  # type: ignore[arg-type]
        if out.stride() != contiguous_strides(tuple(out.shape)):
            continue  # the parts' layouts would give another layout
        with graph.inserting_before(end):
            value = graph.call_function(aten.stack.default, (stack.args[0], new))
            if static_layout(end) is not None and tuple(end.meta["val"].shape) != _stacked_shape(stack, new):
                value = graph.call_function(aten.view.default, (value, list(end.meta["val"].shape)))
        value.meta = dict(end.meta)
        end.replace_all_uses_with(value)
        for dead in reversed(chain):
            graph.erase_node(dead)
        graph.erase_node(stack)
    graph.lint()


def _stacked_shape(stack: torch.fx.Node, new: int) -> tuple[int, ...]:
    shape = list(stack.meta["val"].shape)
    dim = _dim(stack) or 0
    shape.insert(new, shape.pop(dim % len(shape)))
    return tuple(shape)
