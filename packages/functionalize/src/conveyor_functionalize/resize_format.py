"""A ``resize_`` into a memory format runs eagerly.

Note [Resizes into a memory format]: ``x.resize_(size,
memory_format=torch.channels_last)`` gives ``x`` channels-last strides in
eager, but torch's functionalization of ``resize_`` drops the memory format
(the functional tensor comes out contiguous, in torch 2.13 and 2.14.1), and
the epilogue replays the functional tensor's geometry onto the caller's
input: the input and the output were left contiguous (test_view_ops.py's
``test_memory_format_resize_``). Such a program runs the captured aten graph
eagerly, with a warning. ``resize_`` without a memory format, or into the
contiguous one, compiles.
"""

from __future__ import annotations

import torch
import torch.fx

_RESIZE = torch.ops.aten.resize_.default

REASON = (
    "it resizes a tensor into a memory format, which torch's functionalization drops "
    "(Note [Resizes into a memory format])"
)


def resizes_into_memory_format(graph: torch.fx.GraphModule) -> bool:
    """Whether ``graph`` calls ``resize_`` with a memory format other than the contiguous one."""
    for node in graph.graph.nodes:
        if node.op == "call_function" and node.target is _RESIZE:
            fmt = node.args[2] if len(node.args) > 2 else node.kwargs.get("memory_format")
            if fmt is not None and fmt is not torch.contiguous_format:
                return True
    return False
