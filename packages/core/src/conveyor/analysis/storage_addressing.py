"""``as_strided`` or ``resize_`` of a tensor laid out in part of its storage,
in a program that writes: no functional replay can keep its addresses.

Note [Storage offsets functionalization cannot replay]: ``as_strided``,
``as_strided_`` and ``as_strided_scatter`` address the *storage*, by an
absolute offset and strides, not the tensor they are called on. A program
that also writes lets functionalization replace the written tensor by a new
value, a fresh tensor in a storage of its own, and replay each view of it on
that value: an ``as_strided`` of a view at offset 3 of a larger tensor then
reads past the fresh value's one element (``x.add_(1);
x.as_strided_((1,), (1,), 3)`` on ``root.as_strided((1,), (1,), 3)``: the
eager backend raises "out of bounds for storage", the inductor backend read
and wrote memory it does not own). The fresh value reproduces the storage's
addresses only for a tensor that is its storage, densely, from offset 0. So
a program that writes and takes an ``as_strided`` (of any kind) of a tensor
that is not (an input, or a value it made, through any chain of views) runs
the captured aten graph eagerly, with a warning. ``resize_`` is
functionalized so too (an ``as_strided`` of the value, as if it were the
storage from offset 0). A program that only reads such a tensor is never
functionalized (Note [Nothing to functionalize]) and compiles as usual.

The same holds before functionalization: the program record's own
functional run (which finds what the program mutates) wraps each input in a
functional tensor whose storage is as large as that input needs, not the
caller's storage, and the synthetic_base stage rebuilds overlapping inputs
from a base that is an input of its own. So every stage that would replay
such a program asks :func:`as_strided_of_part` first, and runs it eagerly.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx

from conveyor.analysis.overlap import overlaps_itself, span
from conveyor.analysis.schema import addresses_storage, view_root, writes

#: the reason a stage gives when it runs such a program eagerly
STORAGE_ADDRESSING_REASON = (
    "it takes an as_strided of a tensor laid out in part of its storage; a write makes functionalization "
    "replay it on a fresh value that does not hold that storage (Note [Storage offsets functionalization "
    "cannot replay])"
)


def as_strided_of_part(graph: torch.fx.GraphModule) -> torch.fx.Node | None:
    """In a ``graph`` that writes, the first ``as_strided``-family node whose
    source (past its chain of views) is not its whole storage, densely, from
    offset 0. (A graph that writes nothing replaces no tensor by a fresh
    value: the views the epilogue rebuilds are taken of the caller's tensors.)"""
    nodes = graph.graph.nodes
    if not any(n.op == "call_function" and addresses_storage(n) for n in nodes):
        return None
    if not any(n.op == "call_function" and writes(n) for n in nodes):
        return None
    for node in nodes:
        if node.op == "call_function" and addresses_storage(node) and not _owns_storage(view_root(node.args[0])):
            return node
    return None


def _owns_storage(node: Any) -> bool:
    value = node.meta.get("val") if isinstance(node, torch.fx.Node) else None
    if not isinstance(value, torch.Tensor) or value.layout is not torch.strided:
        return False
    try:
        size, stride = [int(n) for n in value.size()], [int(st) for st in value.stride()]
        if int(value.storage_offset()) != 0 or overlaps_itself(value):
            return False
        numel = value.numel()
        return span(size, stride) == numel and int(value.untyped_storage().nbytes()) == numel * value.element_size()
    except (TypeError, ValueError, RuntimeError):  # symbolic: not known to own it
        return False
