"""Storage swaps (``set_``) functionalization cannot replay: run eagerly.

Note [Storage swaps functionalization cannot replay]: functionalization
replays ``a.set_(b)`` as "``a`` is now ``b``'s value, in ``b``'s layout",
and the epilogue points the caller's ``a`` at that storage. That model is
exact for a swap onto another tensor's storage, but not for these, which a
random-program fuzzer found silently wrong (AOTAutograd refuses some of
them, ``aot_autograd() does not yet handle non-differentiable view input
mutations``):

- a swap onto a tensor's own storage (``b.set_(b)``, ``b.set_(b[1:])``): a
  no-op, or a re-view, in eager; replayed, ``b`` moved onto a fresh value's
  storage and an earlier write through ``b`` never reached the caller's;
- a swap of an input that shares its storage with another input
  (``b.set_(a)`` with ``a = r[1]``, ``b = r[0, :2]``): the caller's ``b`` kept
  its old layout;
- a swap under ``no_grad`` of a tensor that requires grad
  (Note [A no-grad set_ keeps its own identity]) that is then written
  through, or whose source is: the write reached ``a``'s value only, not the
  storage it now shares with ``b``; or one onto another shape, which keeps no
  identity to carry: the output silently stopped requiring grad.

Such a program runs the captured aten graph eagerly, with a warning.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.fx
from conveyor.stage_api import GRAD_META, swaps_storage, view_root, written_positions


def unreplayable_swap(graph: torch.fx.GraphModule, inputs: Sequence[Any], grad_enabled: bool) -> str | None:
    """Why a storage swap of ``graph`` cannot be functionalized, or ``None``
    (Note [Storage swaps functionalization cannot replay])."""
    nodes = list(graph.graph.nodes)
    swaps = [k for k, n in enumerate(nodes) if n.op == "call_function" and swaps_storage(n)]
    if not swaps:
        return None
    placeholders = {n: i for i, n in enumerate(n for n in nodes if n.op == "placeholder")}
    for k in swaps:
        node = nodes[k]
        dst = _alias_root(node.args[0]) if node.args else None
        src = _alias_root(node.args[1]) if len(node.args) > 1 and isinstance(node.args[1], torch.fx.Node) else None
        if src is not None and src is dst:
            return "it sets a tensor onto its own storage (Note [Storage swaps functionalization cannot replay])"
        if dst in placeholders and _shares_storage(placeholders[dst], inputs):
            return (
                f"it sets input {placeholders[dst]}, which shares its storage with another input, onto another "
                "storage (Note [Storage swaps functionalization cannot replay])"
            )
        if grad_enabled and not node.meta.get(GRAD_META, True) and _may_require_grad(dst, placeholders, inputs):
            if _shape(node.args[0]) != _shape(node.args[1] if len(node.args) > 1 else None):
                return (
                    "under no_grad it sets a tensor that requires grad onto a storage of another shape "
                    "(Note [Storage swaps functionalization cannot replay])"
                )
            roots = {dst, src, node} - {None}  # later uses of the swapped tensor name the set_ node
            if any(_writes_through(later, roots) for later in nodes[k + 1 :]):
                return (
                    "under no_grad it sets a tensor that requires grad onto another storage, then writes through "
                    "them (Note [Storage swaps functionalization cannot replay])"
                )
    return None


def _alias_root(node: Any) -> Any:
    """The value ``node`` aliases, past views and in-place ops (which return
    the tensor they write: later uses name the in-place node)."""
    while True:
        node = view_root(node)
        if not (isinstance(node, torch.fx.Node) and node.op == "call_function" and node.args):
            return node
        if (0, "self") not in written_positions(node) or swaps_storage(node):
            return node
        node = node.args[0]


def _shares_storage(i: int, inputs: Sequence[Any]) -> bool:
    t = inputs[i]
    if not isinstance(t, torch.Tensor) or t.layout is not torch.strided:
        return False
    key = t.untyped_storage()._cdata
    return any(
        j != i and isinstance(u, torch.Tensor) and u.layout is torch.strided and u.untyped_storage()._cdata == key
        for j, u in enumerate(inputs)
    )


def _value(node: Any) -> Any:
    return node.meta.get("val") if isinstance(node, torch.fx.Node) else None


def _may_require_grad(node: Any, placeholders: dict[Any, int], inputs: Sequence[Any]) -> bool:
    """An input that requires grad, or a value the program computed while
    some input does (the graph's values do not record ``requires_grad``)."""
    if node in placeholders:
        t = inputs[placeholders[node]]
        return isinstance(t, torch.Tensor) and t.requires_grad
    return any(isinstance(t, torch.Tensor) and t.requires_grad for t in inputs)


def _shape(node: Any) -> Any:
    """The shape ``node``'s value had when captured (``None``: unknown, or
    ``set_()`` onto an empty storage)."""
    value = _value(node)
    return tuple(value.shape) if isinstance(value, torch.Tensor) else None


def _writes_through(node: torch.fx.Node, roots: set[Any]) -> bool:
    if node.op != "call_function":
        return False
    for pos, name in written_positions(node):
        arg = node.args[pos] if pos < len(node.args) else node.kwargs.get(name)
        if _alias_root(arg) in roots:
            return True
    return False
