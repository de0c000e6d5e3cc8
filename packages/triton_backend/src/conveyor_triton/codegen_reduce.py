"""A row group's reductions: ``sum``, ``amax`` / ``amin`` and ``argmax`` /
``argmin`` of a row, written into a :class:`~conveyor_triton.codegen.KernelWriter`.

A persistent kernel reduces the row's one tile, computed in the kernel's
body; a looping one accumulates a ``[XBLOCK, RBLOCK]`` tile over the row's
chunks, in a loop of its own, then reduces the tile. Sums accumulate in
float32 for 16-bit floats (the compute dtype), and ``amax`` / ``amin``
propagate NaN as eager does.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.fx

from conveyor_triton.classify import ARG_REDUCTIONS, REDUCTIONS
from conveyor_triton.dtypes import cast, compute_dtype, literal, tl_type

if TYPE_CHECKING:
    from conveyor_triton.codegen import KernelWriter

#: a floating-point accumulator's start
INIT = {"sum": "0", "max": 'float("-inf")', "min": 'float("inf")'}


def init(kind: str, dtype: torch.dtype) -> str:
    """The start of a ``kind`` ("sum", "max", "min") accumulator of ``dtype``."""
    if dtype.is_floating_point:
        return INIT[kind]
    if kind == "sum":
        return "0"
    info = torch.iinfo(dtype)
    return literal(info.min if kind == "max" else info.max)


def row_result(kind: str, acc: str, name: str, acc_dtype: torch.dtype) -> list[str]:
    """The lines reducing the ``[XBLOCK, RBLOCK]`` accumulator ``acc`` over its
    rows into ``name`` (``[XBLOCK, 1]``); a float ``max`` / ``min`` is NaN
    where a lane saw one."""
    if kind == "sum":
        # Triton sums narrow integers in int32: wrap back to the accumulator's type
        total = f"tl.sum({acc}, 1)" if acc_dtype.is_floating_point else f"tl.sum({acc}, 1).to({tl_type(acc_dtype)})"
        return [f"    {name} = {total}[:, None]"]
    fn = "tl.max" if kind == "max" else "tl.min"
    lines = [f"    {name} = {fn}({acc}, 1)[:, None]"]
    if acc_dtype.is_floating_point:
        lines.append(f"    {name} = tl.where(tl.max(({acc} != {acc}).to(tl.int32), 1)[:, None] > 0, float(\"nan\"), {name})")
    return lines


def reduction(w: KernelWriter, node: torch.fx.Node) -> str:
    """The name of reduction ``node``'s row value (``[XBLOCK, 1]``), its lines
    added to the kernel's body."""
    kind = REDUCTIONS[node.target]
    source = node.args[0]
    out_dtype = node.meta["val"].dtype
    acc_dtype = compute_dtype(out_dtype)
    if w.persistent:  # the row is one tile: its values are computed once, in the kernel's body
        body, loop, indent = w.lines, "row", "    "
    else:
        body, loop, indent = [], w.fresh("loop"), "        "
    if source in w.group.members:
        val = w.value(source, loop, body, indent)  # type: ignore[arg-type]
    else:
        val = w.load(source, tuple(source.meta["val"].shape), loop, body, indent)  # type: ignore[arg-type, union-attr]
    src_dtype = source.meta["val"].dtype  # type: ignore[union-attr]
    if kind in ARG_REDUCTIONS:
        return arg_reduction(w, kind, val, compute_dtype(src_dtype), body)
    val = cast(val, src_dtype, out_dtype) if out_dtype is not src_dtype else val
    if acc_dtype is not out_dtype:
        val = cast(val, out_dtype, acc_dtype)
    acc, name, v = w.fresh("acc"), w.fresh("r"), w.fresh("t")
    start = init(kind, acc_dtype)
    if w.persistent:
        w.lines.append(f"    {v} = {val}")
        masked = f"tl.where(fmask, {v}, {'0' if kind == 'sum' else start})"
        w.lines.append(f"    {acc} = {masked}")
    else:
        w.lines.append(f"    {acc} = tl.full([XBLOCK, RBLOCK], {start}, {tl_type(acc_dtype)})")
        w.lines.extend(w.loop_header())
        w.lines.extend(body)
        w.lines.append(f"        {v} = {val}")
        if kind == "sum":
            w.lines.append(f"        {acc} = {acc} + tl.where(fmask, {v}, 0)")
        else:
            op = ">" if kind == "max" else "<"
            nan = f" | ({v} != {v})" if acc_dtype.is_floating_point else ""
            w.lines.append(f"        {acc} = tl.where(fmask & (({v} {op} {acc}){nan}), {v}, {acc})")
    w.lines.extend(row_result(kind, acc, name, acc_dtype))
    return name


def arg_reduction(w: KernelWriter, kind: str, val: str, dtype: torch.dtype, body: list[str]) -> str:
    """Note [Arg reductions]: ``argmax`` / ``argmin`` as eager computes them:
    the index of the first extreme value of the row, a NaN counting as the
    extreme (the first NaN wins). Each lane of the tile keeps its best value
    and that value's index (``rnumel``: none yet); chunks come in index
    order, so a lane replaces its value only by a strictly better one and
    keeps the first of equals. The row's result is then the smallest index
    among the lanes holding the row's extreme (a NaN if the row has one),
    two plain ``tl.max`` / ``tl.min`` reductions; Triton's ``tl.argmax``
    is not used (its NaN handling is not eager's)."""
    acc, idx, name, v, ext = w.fresh("acc"), w.fresh("idx"), w.fresh("r"), w.fresh("t"), w.fresh("m")
    floating = dtype.is_floating_point
    op = ">" if kind == "argmax" else "<"
    start = init(kind[3:], dtype)
    if w.persistent:
        w.lines.append(f"    {v} = {val}")
        w.lines.append(f"    {acc} = tl.where(fmask, {v}, {start})")
        w.lines.append(f"    {idx} = tl.where(fmask, rindex, rnumel)")
    else:
        index = "tl.int64" if w.index64 else "tl.int32"
        take = w.fresh("take")
        w.lines.append(f"    {acc} = tl.full([XBLOCK, RBLOCK], {start}, {tl_type(dtype)})")
        w.lines.append(f"    {idx} = tl.zeros([XBLOCK, RBLOCK], {index}) + rnumel")
        w.lines.extend(w.loop_header())
        w.lines.extend(body)
        w.lines.append(f"        {v} = {val}")
        better = f"({v} {op} {acc})"
        if floating:  # a NaN replaces a number, nothing replaces a NaN
            better = f"((({v} {op} {acc}) | ({v} != {v})) & ({acc} == {acc}))"
        w.lines.append(f"        {take} = fmask & ({better} | ({idx} == rnumel))")
        w.lines.append(f"        {acc} = tl.where({take}, {v}, {acc})")
        w.lines.append(f"        {idx} = tl.where({take}, rindex, {idx})")
    fn = "tl.max" if kind == "argmax" else "tl.min"
    w.lines.append(f"    {ext} = {fn}({acc}, 1)[:, None]")
    hit = f"({acc} == {ext})"
    if floating:
        nan = f"(tl.max(({acc} != {acc}).to(tl.int32), 1)[:, None] > 0)"
        hit = f"tl.where({nan}, {acc} != {acc}, {hit})"
    w.lines.append(f"    {name} = tl.min(tl.where(({idx} < rnumel) & {hit}, {idx}, rnumel), 1)[:, None].to(tl.int64)")
    return name
