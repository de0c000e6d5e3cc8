"""Scans (``cumsum``) inside a row group (Note [Scans]), written into a
:class:`~conveyor_triton.codegen.KernelWriter`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch.fx

from conveyor_triton.dtypes import compute_dtype, tl_type
from conveyor_triton.ops import Value

if TYPE_CHECKING:
    from conveyor_triton.codegen import KernelWriter


def scan(w: KernelWriter, node: torch.fx.Node, scope: str, out: list[str], indent: str) -> str:
    """Note [Scans]: ``cumsum`` along a dimension, a full value of a row
    group over that dimension (a permuted group for another dimension than
    the last: Note [Permuted groups]), ``tl.cumsum`` over the tile's rows, in
    the output's compute dtype; narrow integers and bool in int64 as
    eager). A persistent kernel scans the whole row at once; a loop over
    the row (chunks in order) adds a carry, the sum of the chunks before,
    set to zero before the loop that computes the value. A scan is never
    split (``lower._splittable``)."""
    source = node.args[0]
    dtype = compute_dtype(node.meta["val"].dtype)
    if source in w.group.members:
        val = w.value(source, scope, out, indent)  # type: ignore[arg-type]
    else:
        val = w.load(source, tuple(source.meta["val"].shape), scope, out, indent)  # type: ignore[arg-type, union-attr]
    src_dtype = source.meta["val"].dtype  # type: ignore[union-attr]
    v, name = w.fresh("t"), w.fresh("s")
    out.append(f"{indent}{v} = tl.where(fmask, {Value(val, src_dtype).to(dtype)}, 0)")
    if w.persistent:
        out.append(f"{indent}{name} = tl.cumsum({v}, 1)")
        return name
    carry = w.fresh("carry")
    w.lines.append(f"    {carry} = tl.zeros([XBLOCK, 1], {tl_type(dtype)})")
    out.append(f"{indent}{name} = tl.cumsum({v}, 1) + {carry}")
    out.append(f"{indent}{carry} = {carry} + tl.sum({v}, 1)[:, None]")
    return name
