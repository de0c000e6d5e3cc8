"""A ``resize_`` into a memory format, and a ``resize_as_`` that grows its tensor, run eagerly.

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
_RESIZE_AS = torch.ops.aten.resize_as_.default

REASON = (
    "it resizes a tensor into a memory format, which torch's functionalization drops "
    "(Note [Resizes into a memory format])"
)


def resizes_into_memory_format(graph: torch.fx.GraphModule) -> bool:
    """Whether ``graph`` calls ``resize_`` (or ``resize_as_``) with a memory format other than the contiguous one."""
    for node in graph.graph.nodes:
        if node.op == "call_function" and node.target in (_RESIZE, _RESIZE_AS):
            fmt = node.args[2] if len(node.args) > 2 else node.kwargs.get("memory_format")
            if fmt is not None and fmt is not torch.contiguous_format:
                return True
    return False


# Note [resize_as_ that grows a tensor]: ``x.resize_as_(t)`` with ``t`` larger
# than ``x`` keeps the values ``x``'s storage already holds past its old size in
# eager (a tensor resized within its storage, ``torch.arange(12.).resize_(2, 3)``,
# or an intermediate shrunk and grown again). torch's functionalization turns it
# into the functional ``resize_as``, a fresh tensor whose new elements are
# uninitialized memory: the program read garbage where eager read the storage's
# values (silently), or failed on the epilogue's write back (test_misc.py's
# test_inplace_view_on_graph_input; h_misc, session 13). ``resize_`` is not
# functionalized so. A ``resize_as_`` that grows its tensor (or whose sizes are
# symbolic) runs the captured graph eagerly, with a warning; one that keeps or
# shrinks the size compiles.
GROW_REASON = (
    "it grows a tensor with resize_as_, which torch's functionalization makes a fresh tensor "
    "without the values its storage holds (Note [resize_as_ that grows a tensor])"
)


def grows_with_resize_as(graph: torch.fx.GraphModule) -> bool:
    """Whether ``graph`` calls ``resize_as_`` to a larger (or symbolic) size than its tensor's."""
    for node in graph.graph.nodes:
        if node.op != "call_function" or node.target is not _RESIZE_AS:
            continue
        self_val, template = (a.meta.get("val") if isinstance(a, torch.fx.Node) else None for a in node.args[:2])
        if not (isinstance(self_val, torch.Tensor) and isinstance(template, torch.Tensor)):
            return True
        try:
            if int(template.numel()) > int(self_val.numel()):
                return True
        except (TypeError, ValueError, RuntimeError):  # symbolic sizes
            return True
    return False
