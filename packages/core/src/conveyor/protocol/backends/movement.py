"""Note [Movement chains]: a backward graph moves data around more than it
computes: an attention gradient is copied contiguous, viewed, transposed,
copied contiguous again and viewed again (``clone, _unsafe_view, transpose,
clone, _unsafe_view``) before a matrix product reads it; a saved projection
is selected, viewed, transposed and viewed before the attention backward
reads it. The eager backend calls each of them from Python. Every element
of the last value of such a chain is one element of its first value, so
when the chain's last value is a strided view of its first value's storage
(a view chain always is; a chain with copies sometimes is), the chain is one
``as_strided`` of the first value, followed by one contiguous ``clone`` when
the chain copied: two calls and at most one copy, with the same values, sizes
and strides, so every reader computes the same bits.

:func:`collapse_movement` finds, for each value a non-movement op reads, the
chain of single-reader movement ops that made it, runs that chain on a
tensor of storage positions (``arange`` laid out as the chain's first value)
to learn where each element comes from, and rewrites the chain when:

* every size, stride and offset involved is an int (static shapes);
* a chain without a copy ends in a view of those positions with the strides
  the graph recorded (its readers see the same layout); a chain with a copy
  ends in a contiguous value that owns its whole storage, whose positions
  are exactly a strided view's;
* the rewrite makes fewer calls.

The strides the positions were read from are the recorded (fake) strides of
the chain's first value, and a kernel may lay a value out otherwise than
its fake did. So the rewrite is one call of :func:`restride`, which checks
the first value's strides on every run (its storage offset is read then,
not assumed) and replays the original chain when they differ: never wrong.

A graph that writes, or runs under grad (``as_strided``'s backward is not
the chain's), is left as it is, as is a chain whose value is a graph output
without a copy (the caller may tell outputs apart by their base).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx

from conveyor.analysis.schema import writes
from conveyor.protocol.backends.rewriting import Rewriting

aten = torch.ops.aten

_VIEWS = frozenset(
    {
        aten.view.default,
        aten._unsafe_view.default,
        aten.t.default,
        aten.transpose.int,
        aten.permute.default,
        aten.select.int,
        aten.unsqueeze.default,
        aten.squeeze.dim,
        aten.expand.default,
        aten.slice.Tensor,
        aten.alias.default,
        aten.detach.default,
    }
)
CLONE = aten.clone.default


def is_movement(node: Any) -> bool:
    if not isinstance(node, torch.fx.Node) or node.op != "call_function":
        return False
    if node.target is CLONE:
        return set(node.kwargs) <= {"memory_format"}
    return node.target in _VIEWS


def static_values(value: Any) -> bool:
    if isinstance(value, (list, tuple)):
        return all(static_values(v) for v in value)
    return value is None or type(value) in (int, bool) or isinstance(value, torch.memory_format)


def static_layout(node: torch.fx.Node) -> tuple[tuple[int, ...], tuple[int, ...], int] | None:
    val = node.meta.get("val")
    if not isinstance(val, torch.Tensor) or val.layout is not torch.strided:
        return None
    shape, stride, offset = tuple(val.shape), tuple(val.stride()), val.storage_offset()
    if not static_values(shape) or not static_values(stride) or type(offset) is not int:
        return None
    return shape, stride, offset


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for size in reversed(shape):
        strides.append(acc)
        acc *= max(size, 1)
    return tuple(reversed(strides))


def chain_of(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The single-reader movement ops that made ``node``, first one first."""
    chain = [node]
    current = node.args[0]
    while is_movement(current) and len(current.users) == 1:  # type: ignore[union-attr]
        chain.append(current)  # type: ignore[arg-type]
        current = current.args[0]  # type: ignore[union-attr]
    chain.reverse()
    return chain


def _plan(chain: list[torch.fx.Node]) -> tuple[tuple[int, ...], tuple[int, ...], int, bool] | None:
    """``(shape, strides, offset relative to the source's, copies)`` of the
    chain's last value over its source's storage, or ``None``."""
    source = chain[0].args[0]
    if not isinstance(source, torch.fx.Node):
        return None
    src, last = static_layout(source), static_layout(chain[-1])
    if src is None or last is None:
        return None
    shape, stride, offset = src
    if any(s == 0 for s in shape) or any(s < 0 for s in stride):
        return None
    span = offset + sum((n - 1) * s for n, s in zip(shape, stride, strict=True)) + 1
    positions = torch.arange(span).as_strided(shape, stride, offset)
    copies = False
    try:
        for node in chain:
            args = node.args[1:]
            if not static_values(args) or not all(static_values(v) for v in node.kwargs.values()):
                return None
            copies = copies or node.target is CLONE
            positions = node.target(positions, *args, **node.kwargs)  # type: ignore[operator]
    except RuntimeError:
        return None
    out_shape, out_stride, out_offset = last
    if tuple(positions.shape) != out_shape:
        return None
    if not copies:
        if positions.stride() != out_stride:
            return None
        return out_shape, out_stride, int(positions.storage_offset()) - offset, False
    # a copy: the value must own a contiguous storage of its own, and its positions be a strided view's
    val = chain[-1].meta["val"]
    if out_offset != 0 or out_stride != contiguous_strides(out_shape):
        return None
    try:
        if val.untyped_storage().nbytes() != val.numel() * val.element_size():
            return None
    except (RuntimeError, NotImplementedError):
        return None
    flat = positions.reshape(-1)
    first = int(flat[0])
    strides = []
    for dim, size in enumerate(out_shape):
        if size == 1:
            strides.append(1)
            continue
        unit = [0] * len(out_shape)
        unit[dim] = 1
        strides.append(int(positions[tuple(unit)]) - first)
    if any(s < 0 for s in strides):
        return None
    if first + sum((n - 1) * s for n, s in zip(out_shape, strides, strict=True)) >= span:
        return None  # not a view of the source's storage
    expected = torch.arange(span).as_strided(out_shape, strides, first)
    if not torch.equal(expected, positions):
        return None
    return out_shape, tuple(strides), first - offset, True


def restride(
    source: torch.Tensor,
    shape: list[int],
    strides: list[int],
    relative: int,
    source_strides: tuple[int, ...],
    copies: bool,
    chain: tuple[tuple[Any, tuple[Any, ...], dict[str, Any]], ...],
) -> torch.Tensor:
    """A collapsed chain at run time (Note [Movement chains]): ``as_strided``
    of ``source`` (and a contiguous copy), or, when ``source`` is not laid
    out as recorded, the original ``chain`` of ``(op, args, kwargs)``."""
    if isinstance(source, torch.fx.Proxy):  # FX re-tracing the graph's code (unpickling it): the call itself
        args = (source, shape, strides, relative, source_strides, copies, chain)
        return source.tracer.create_proxy("call_function", restride, args, {})  # type: ignore[return-value]
    if source.stride() == source_strides:
        value = torch.as_strided(source, shape, strides, source.storage_offset() + relative)
        return value.clone(memory_format=torch.contiguous_format) if copies else value
    for op, args, kwargs in chain:
        source = op(source, *args, **kwargs)
    return source


def collapse_movement(rewriting: Rewriting) -> None:
    """The movement chains of the graph of ``rewriting`` collapsed (Note
    [Movement chains], Note [One copy for the rewrites])."""
    nodes = rewriting.graph.nodes
    if any(writes(n) for n in nodes if n.op == "call_function"):
        return
    output = next((n for n in reversed(nodes) if n.op == "output"), None)
    returned = set(output.all_input_nodes) if output is not None else set()
    found: list[tuple[list[str], str, tuple[tuple[int, ...], tuple[int, ...], int, bool]]] = []
    for node in nodes:
        if not is_movement(node) or (all(is_movement(u) for u in node.users) and node not in returned):
            continue
        chain = chain_of(node)
        if len(chain) < 2 + (node in returned):
            continue
        plan = _plan(chain)
        if plan is None or (node in returned and not plan[3]):
            continue
        source = chain[0].args[0]
        assert isinstance(source, torch.fx.Node)
        found.append(([n.name for n in chain], source.name, plan))
    if not found:
        return
    graph = rewriting.writable()
    by_name = {n.name: n for n in graph.nodes}
    for names, source_name, (shape, strides, relative, copies) in found:
        if source_name not in by_name or any(n not in by_name for n in names):
            continue  # its source was the end of a chain rewritten before it
        chain = [by_name[n] for n in names]
        node, source = chain[-1], by_name[source_name]
        layout = static_layout(source)
        assert layout is not None
        replay = tuple((n.target, tuple(n.args[1:]), dict(n.kwargs)) for n in chain)
        with graph.inserting_before(node):
            args = (source, list(shape), list(strides), relative, layout[1], copies, replay)
            value = graph.call_function(restride, args)  # type: ignore[arg-type]
        value.meta = dict(node.meta)
        node.replace_all_uses_with(value)
        for dead in reversed(chain):
            graph.erase_node(dead)
            del by_name[dead.name]
    graph.lint()
