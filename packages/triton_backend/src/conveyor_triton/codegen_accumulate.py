"""Accumulators of a looped reduction: each reduction's share of a pass over
the row (Note [Reduction passes] in ``conveyor_triton.codegen_reduce``).

A :class:`Part` is a ``[XBLOCK, RBLOCK]`` tile of per-lane accumulators: its
start (before the loop), its update from the chunk's value (in the loop) and
the lines that reduce the lanes to the row's value (after it). Sums
accumulate in the compute dtype (float32 for 16-bit floats); ``amax`` /
``amin`` propagate NaN as eager does; ``argmax`` / ``argmin`` follow Note
[Arg reductions]. Two folded forms compute a sum that reads a row value
``c`` of the same pass without knowing ``c`` in the loop:
:func:`squares_part` (Welford) and :func:`exp_part` (an online softmax sum).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from conveyor_triton.dtypes import literal, tl_type

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


def arg_result(kind: str, acc: str, idx: str, ext: str, name: str, floating: bool) -> list[str]:
    """Note [Arg reductions]: the row's index from the lanes' best values
    ``acc`` and their indexes ``idx`` (``rnumel``: none)."""
    fn = "tl.max" if kind == "argmax" else "tl.min"
    hit = f"({acc} == {ext})"
    if floating:
        nan = f"(tl.max(({acc} != {acc}).to(tl.int32), 1)[:, None] > 0)"
        hit = f"tl.where({nan}, {acc} != {acc}, {hit})"
    return [
        f"    {ext} = {fn}({acc}, 1)[:, None]",
        f"    {name} = tl.min(tl.where(({idx} < rnumel) & {hit}, {idx}, rnumel), 1)[:, None].to(tl.int64)",
    ]


@dataclass(frozen=True)
class Part:
    """One reduction's accumulators in a pass over the row.

    :ivar name: the row value's name (``[XBLOCK, 1]``) once ``finish`` ran.
    :ivar init: lines before the loop.
    :ivar update: lines in the loop, after the values they read.
    :ivar finish: adds the lines after the loop that compute ``name``.
    """

    name: str
    init: list[str]
    update: list[str]
    finish: Callable[[], None]


def plain_part(w: KernelWriter, kind: str, val: str, acc_dtype: torch.dtype) -> Part:
    """A ``sum`` / ``max`` / ``min`` of ``val`` (held in ``acc_dtype``)."""
    acc, name, v = w.fresh("acc"), w.fresh("r"), w.fresh("t")
    update = [f"        {v} = {val}"]
    if kind == "sum":
        update.append(f"        {acc} = {acc} + tl.where(fmask, {v}, 0)")
    else:
        op = ">" if kind == "max" else "<"
        nan = f" | ({v} != {v})" if acc_dtype.is_floating_point else ""
        update.append(f"        {acc} = tl.where(fmask & (({v} {op} {acc}){nan}), {v}, {acc})")
    start = f"    {acc} = tl.full([XBLOCK, RBLOCK], {init(kind, acc_dtype)}, {tl_type(acc_dtype)})"
    return Part(name, [start], update, lambda: w.lines.extend(row_result(kind, acc, name, acc_dtype)))


def arg_part(w: KernelWriter, kind: str, val: str, dtype: torch.dtype) -> Part:
    """Note [Arg reductions]: ``argmax`` / ``argmin`` of ``val`` (held in
    ``dtype``). Chunks come in index order, so a lane replaces its value only
    by a strictly better one and keeps the first of equals."""
    acc, idx, name, v, ext = w.fresh("acc"), w.fresh("idx"), w.fresh("r"), w.fresh("t"), w.fresh("m")
    floating = dtype.is_floating_point
    op = ">" if kind == "argmax" else "<"
    index = "tl.int64" if w.index64 else "tl.int32"
    take = w.fresh("take")
    start = [
        f"    {acc} = tl.full([XBLOCK, RBLOCK], {init(kind[3:], dtype)}, {tl_type(dtype)})",
        f"    {idx} = tl.zeros([XBLOCK, RBLOCK], {index}) + rnumel",
    ]
    better = f"({v} {op} {acc})"
    if floating:  # a NaN replaces a number, nothing replaces a NaN
        better = f"((({v} {op} {acc}) | ({v} != {v})) & ({acc} == {acc}))"
    update = [
        f"        {v} = {val}",
        f"        {take} = fmask & ({better} | ({idx} == rnumel))",
        f"        {acc} = tl.where({take}, {v}, {acc})",
        f"        {idx} = tl.where({take}, rindex, {idx})",
    ]
    return Part(name, start, update, lambda: w.lines.extend(arg_result(kind, acc, idx, ext, name, floating)))


def squares_part(w: KernelWriter, x: str, row: Callable[[], str], dtype: torch.dtype) -> Part:
    """``sum((x - c) ** 2)`` over the row, ``c = row()`` a row value known only
    after the loop (a variance about a mean of the same pass): each lane keeps
    Welford's count, mean and sum of squared deviations of its ``x``; after
    the loop the lanes combine (Chan et al.) into the row's count ``n``, mean
    ``m`` and ``M2``, and the sum is ``M2 + n * (m - c) ** 2``, which holds for
    any ``c``. A row of no elements sums to 0."""
    t = tl_type(dtype)
    cnt, mean, m2, name = w.fresh("wn"), w.fresh("wm"), w.fresh("w2"), w.fresh("r")
    v, k, d = w.fresh("t"), w.fresh("k"), w.fresh("d")
    start = [f"    {a} = tl.zeros([XBLOCK, RBLOCK], {t})" for a in (cnt, mean, m2)]
    update = [
        f"        {v} = {x}",
        f"        {k} = {cnt} + fmask.to({t})",
        f"        {d} = {v} - {mean}",
        f"        {mean} = tl.where(fmask, {mean} + {d} / tl.maximum({k}, 1), {mean})",
        f"        {m2} = tl.where(fmask, {m2} + {d} * ({v} - {mean}), {m2})",
        f"        {cnt} = {k}",
    ]

    def finish() -> None:
        n, rm, dm, e = w.fresh("n"), w.fresh("m"), w.fresh("dm"), w.fresh("e")
        w.lines += [
            f"    {n} = tl.sum({cnt}, 1)[:, None]",
            f"    {rm} = tl.sum({mean} * {cnt}, 1)[:, None] / tl.maximum({n}, 1)",
            f"    {dm} = {mean} - {rm}",
        ]
        c = row()
        w.lines += [
            f"    {e} = {rm} - {c}",
            f"    {name} = tl.sum({m2} + {cnt} * {dm} * {dm}, 1)[:, None] + {n} * {e} * {e}",
            f"    {name} = tl.where({n} > 0, {name}, 0)",
        ]

    return Part(name, start, update, finish)


def exp_part(w: KernelWriter, x: str, row: Callable[[], str], dtype: torch.dtype) -> Part:
    """``sum(exp(x - c))`` over the row, ``c = row()`` a row value known only
    after the loop (a softmax's sum, ``c`` the row's max of the same pass):
    each lane keeps the max ``m`` of its ``x`` and ``sum(exp(x - m))``, rescaled
    when its max grows (an online softmax); after the loop the sum is
    ``sum(s * exp(m - c))`` over the lanes, for any ``c``. A lane that saw only
    ``-inf`` (or nothing) holds 0; a NaN or ``+inf`` makes the sum NaN, as
    eager's ``x - max(x)`` does."""
    t = tl_type(dtype)
    mx, s, name = w.fresh("om"), w.fresh("os"), w.fresh("r")
    v, nm, shift = w.fresh("t"), w.fresh("nm"), w.fresh("sh")
    start = [f"    {mx} = tl.full([XBLOCK, RBLOCK], float(\"-inf\"), {t})", f"    {s} = tl.zeros([XBLOCK, RBLOCK], {t})"]
    update = [
        f"        {v} = tl.where(fmask, {x}, float(\"-inf\"))",
        f"        {nm} = tl.maximum({mx}, {v})",
        f"        {shift} = tl.where({nm} == float(\"-inf\"), 0, {nm})",
        f"        {s} = {s} * tl.exp({mx} - {shift}) + tl.exp({v} - {shift})",
        f"        {mx} = {nm}",
    ]

    def finish() -> None:
        c = row()
        w.lines.append(f"    {name} = tl.sum({s} * tl.exp({mx} - {c}), 1)[:, None]")

    return Part(name, start, update, finish)
