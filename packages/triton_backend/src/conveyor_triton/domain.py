"""Index spaces of fusion groups (Note [Linear index] in ``conveyor_triton.fusion``):
shapes of nodes, and when a value can be read at another node's linear index."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Literal, cast

import torch
import torch.fx

Kind = Literal["full", "row"]


def shape(node: torch.fx.Node) -> tuple[int, ...]:
    return tuple(node.meta["val"].shape)


def numel(node: torch.fx.Node) -> int:
    return math.prod(shape(node))


def contiguous_strides(shape: tuple[int, ...]) -> list[int]:
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= s
    return strides[::-1]


def reduction_dims(node: torch.fx.Node) -> tuple[int, ...]:
    """The dimensions a reduction node reduces, sorted (empty list: all)."""
    rank = len(shape(node.args[0]))  # type: ignore[arg-type]
    dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return tuple(range(rank))
    dim_list: list[int] = [dims] if isinstance(dims, int) else list(cast(Sequence[int], dims))
    return tuple(sorted({d % max(rank, 1) for d in dim_list})) if rank else ()


def access_ok(src: tuple[int, ...], src_kind: Kind, dst: tuple[int, ...], dst_kind: Kind, reduce: int) -> bool:
    """Whether a value of shape ``src`` (kind ``src_kind``), broadcast to the
    shape ``dst`` of a ``dst_kind`` node, is read at the same linear index
    (Note [Linear index])."""
    if len(src) > len(dst) or (src_kind == "full" and dst_kind == "row"):
        return False
    padded = (1,) * (len(dst) - len(src)) + src
    if any(s not in (1, d) for s, d in zip(padded, dst)):
        return False
    src_strides = contiguous_strides(padded)
    expanded = [0 if s == 1 else st for s, st in zip(padded, src_strides)]
    dst_strides = contiguous_strides(dst)
    scale = reduce if (src_kind == "row" and dst_kind == "full") else 1
    if scale != 1 and scale not in dst_strides and scale != math.prod(dst):
        return False
    for size, e, c in zip(dst, expanded, dst_strides):
        if size == 1:
            continue
        if c >= scale:
            if c % scale or e != c // scale:
                return False
        elif e != 0:
            return False
    return True


def row_broadcast_ok(src: tuple[int, ...], dst: tuple[int, ...], reduced: tuple[int, ...]) -> bool:
    """In a permuted group: a row value of shape ``src`` broadcast to the full
    shape ``dst`` is constant along the ``reduced`` dimensions and equal to
    ``dst`` along the others (so its linear index is that of the kept ones)."""
    if len(src) > len(dst):
        return False
    padded = (1,) * (len(dst) - len(src)) + src
    return all(s == 1 if i in reduced else s == d for i, (s, d) in enumerate(zip(padded, dst)))


def broadcasts(src: tuple[int, ...], dst: tuple[int, ...]) -> bool:
    """Whether a value of shape ``src`` broadcasts to ``dst``."""
    if len(src) > len(dst):
        return False
    padded = (1,) * (len(dst) - len(src)) + src
    return all(s in (1, d) for s, d in zip(padded, dst))
