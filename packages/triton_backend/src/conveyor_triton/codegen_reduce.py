"""A row group's reductions: ``sum``, ``amax`` / ``amin`` and ``argmax`` /
``argmin`` of a row, written into a :class:`~conveyor_triton.codegen.KernelWriter`.

A persistent kernel reduces the row's one tile, computed in the kernel's
body. A looping one reads the row in chunks, several reductions per loop:

Note [Reduction passes]: every looped reduction of a kernel is planned
once, into *passes*, one loop over the row each. A reduction whose source
reads another reduction of the group must run in a later pass than that one
(its loop needs the row value); reductions that do not depend on each other
share a pass, so a layer norm backward's sums, or a ``sum``, ``amax`` and
``amin`` of one input, read it once. Two forms that read a row value ``c``
of their own pass are *folded* into it instead, their lanes accumulating
something that does not need ``c`` (:mod:`conveyor_triton.codegen_accumulate`):

* ``sum((x - c) ** 2)`` (a variance about a mean ``c = sum(x) / n``: a
  layer norm, ``var_mean``), by Welford's update;
* ``sum(exp(x - c))`` (a softmax's or log-softmax's sum, ``c = amax(x)``),
  as an online softmax.

A reduction's pass is then 0 when its loop reads no reduction, else one
after the latest pass its loop reads, and no earlier than the passes ``c``
reads. A softmax or a layer norm over rows longer than a persistent tile
reads its input twice (one pass, then the loop that stores) instead of
three times. The folded forms agree with the plain ones within float
rounding; NaN and infinities come out as eager's. Only members the stored
values read are planned, in graph order. A pass's loop is written when its
first reduction is asked for; the plain row values right after it, a
folded sum's when it is asked for (its ``c`` may be the very value whose
computation asked for the pass).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch
import torch.fx

from conveyor_triton.classify import ARG_REDUCTIONS, REDUCTIONS
from conveyor_triton.codegen_accumulate import (
    Part,
    arg_part,
    arg_result,
    exp_part,
    init,
    plain_part,
    row_result,
    squares_part,
)
from conveyor_triton.domain import Kind
from conveyor_triton.dtypes import cast, compute_dtype
from conveyor_triton.fusion import Group

if TYPE_CHECKING:
    from conveyor_triton.codegen import KernelWriter

aten = torch.ops.aten
_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def reduction(w: KernelWriter, node: torch.fx.Node) -> str:
    """The name of reduction ``node``'s row value (``[XBLOCK, 1]``), its lines
    added to the kernel's body (a looped kernel: its whole pass's)."""
    if not w.persistent:
        return _looped(w, node)
    kind = REDUCTIONS[node.target]
    source = node.args[0]
    out_dtype = node.meta["val"].dtype
    acc_dtype = compute_dtype(out_dtype)
    val = _source_value(w, node, "row", w.lines, "    ")
    src_dtype = source.meta["val"].dtype  # type: ignore[union-attr]
    if kind in ARG_REDUCTIONS:
        return _persistent_arg(w, kind, val, compute_dtype(src_dtype))
    val = _to_acc(val, src_dtype, out_dtype)
    acc, name, v = w.fresh("acc"), w.fresh("r"), w.fresh("t")
    w.lines.append(f"    {v} = {val}")
    masked = f"tl.where(fmask, {v}, {'0' if kind == 'sum' else init(kind, acc_dtype)})"
    w.lines.append(f"    {acc} = {masked}")
    w.lines.extend(row_result(kind, acc, name, acc_dtype))
    return name


def _source_value(w: KernelWriter, node: torch.fx.Node, scope: str, body: list[str], indent: str) -> str:
    source = node.args[0]
    if source in w.group.members:
        return w.value(source, scope, body, indent)  # type: ignore[arg-type]
    return w.load(source, tuple(source.meta["val"].shape), scope, body, indent)  # type: ignore[arg-type, union-attr]


def _to_acc(val: str, src_dtype: torch.dtype, out_dtype: torch.dtype) -> str:
    val = cast(val, src_dtype, out_dtype) if out_dtype is not src_dtype else val
    acc_dtype = compute_dtype(out_dtype)
    return cast(val, out_dtype, acc_dtype) if acc_dtype is not out_dtype else val


def _persistent_arg(w: KernelWriter, kind: str, val: str, dtype: torch.dtype) -> str:
    """Note [Arg reductions] over the row's one tile."""
    acc, idx, name, v, ext = w.fresh("acc"), w.fresh("idx"), w.fresh("r"), w.fresh("t"), w.fresh("m")
    start = init(kind[3:], dtype)
    w.lines.append(f"    {v} = {val}")
    w.lines.append(f"    {acc} = tl.where(fmask, {v}, {start})")
    w.lines.append(f"    {idx} = tl.where(fmask, rindex, rnumel)")
    w.lines.extend(arg_result(kind, acc, idx, ext, name, dtype.is_floating_point))
    return name


# -- passes (Note [Reduction passes]) ------------------------------------------


@dataclass(frozen=True)
class Fold:
    """A ``sum`` folded into the pass of the row value ``c`` it reads:
    ``sum((x - c) ** 2)`` (``kind`` "squares") or ``sum(exp(x - c))`` ("exp");
    ``sub`` is the ``x - c`` node."""

    kind: str
    sub: torch.fx.Node
    x: torch.fx.Node
    c: torch.fx.Node


@dataclass(frozen=True)
class Plan:
    """A kernel's looped reductions in graph order, each one's pass, and the
    folded ones' forms."""

    order: tuple[torch.fx.Node, ...]
    level: dict[torch.fx.Node, int]
    folds: dict[torch.fx.Node, Fold]


class Passes:
    """A looped kernel's reduction passes as they are written: the plan, and
    the folded sums whose loop is written but whose row value is not yet
    (it is written when first asked for, Note [Reduction passes])."""

    def __init__(self, plan: Plan) -> None:
        self.plan = plan
        self.pending: dict[torch.fx.Node, Part] = {}


def plan(group: Group, stored: list[torch.fx.Node]) -> Plan:
    """The passes of ``group``'s reductions that ``stored`` reads."""
    members = group.members
    needed: set[torch.fx.Node] = set()
    stack = list(stored)
    while stack:
        n = stack.pop()
        if n in needed or n not in members:
            continue
        needed.add(n)
        stack.extend(n.all_input_nodes)
    order = tuple(n for n in members if n in needed and n.target in REDUCTIONS)

    def reads(start: object) -> set[torch.fx.Node]:
        """The reductions of the group a value computed from ``start`` reads."""
        found: set[torch.fx.Node] = set()
        seen: set[torch.fx.Node] = set()
        todo = [start] if isinstance(start, torch.fx.Node) else []
        while todo:
            n = todo.pop()
            if n in seen or n not in members:
                continue
            seen.add(n)
            if n.target in REDUCTIONS:
                found.add(n)
            else:
                todo.extend(n.all_input_nodes)
        return found

    folds: dict[torch.fx.Node, Fold] = {}
    level: dict[torch.fx.Node, int] = {}
    for r in order:  # graph order: what a reduction reads comes before it
        fold = _fold(r, members)
        soft = reads(fold.c) if fold is not None else set()
        if fold is not None and soft:
            folds[r] = fold
            hard = reads(fold.x)
        else:
            hard = reads(r.args[0])
        level[r] = max([level.get(h, 0) + 1 for h in hard] + [level.get(s, 0) for s in soft] + [0])
    return Plan(order, level, folds)


def _fold(node: torch.fx.Node, members: dict[torch.fx.Node, Kind]) -> Fold | None:
    """``node`` as a :class:`Fold` when it is one of the two forms over values
    of one floating dtype, ``c`` a row value of the group."""
    if REDUCTIONS.get(node.target) != "sum" or node.kwargs.get("dtype") is not None:
        return None
    src = node.args[0]
    if not isinstance(src, torch.fx.Node) or members.get(src) != "full":
        return None
    if src.target is aten.exp.default:
        kind, sub = "exp", src.args[0]
    elif src.target is aten.mul.Tensor and _same_difference(src.args[0], src.args[1]):
        kind, sub = "squares", src.args[0]
    elif src.target is aten.pow.Tensor_Scalar and src.args[1] == 2:
        kind, sub = "squares", src.args[0]
    else:
        return None
    if not isinstance(sub, torch.fx.Node) or sub.target is not aten.sub.Tensor or members.get(sub) != "full":
        return None
    if sub.kwargs.get("alpha", 1) != 1 or len(sub.args) != 2:
        return None
    x, c = sub.args
    if not isinstance(x, torch.fx.Node) or not isinstance(c, torch.fx.Node) or members.get(c) != "row":
        return None
    dtypes = {n.meta["val"].dtype for n in (node, src, sub, x, c)}
    if len(dtypes) != 1 or dtypes.pop() not in _FLOATS:
        return None
    return Fold(kind, sub, x, c)


def _same_difference(a: object, b: object) -> bool:
    """``a`` and ``b`` are one ``x - c`` (one node, or two of the same operands)."""
    if a is b:
        return True
    if not isinstance(a, torch.fx.Node) or not isinstance(b, torch.fx.Node):
        return False
    return a.target is b.target is aten.sub.Tensor and not a.kwargs and not b.kwargs and a.args == b.args


def _looped(w: KernelWriter, node: torch.fx.Node) -> str:
    if w.passes is None:
        w.passes = Passes(plan(w.group, w.stored))
    p, pending = w.passes.plan, w.passes.pending
    if node not in pending:
        if node not in p.level:  # not read by a stored value: a pass of its own
            _emit(w, [node])
        else:
            same = [r for r in p.order if p.level[r] == p.level[node]]
            _emit(w, [r for r in same if (r, "outer") not in w.memo and r not in pending])
    if node in pending:  # a folded sum: its row value once c's reductions have theirs
        part = pending.pop(node)
        part.finish()
        return part.name
    return w.memo[(node, "outer")]


def _emit(w: KernelWriter, members: list[torch.fx.Node]) -> None:
    """One loop over the row computing ``members``' accumulators, then the
    row values of those that are not folded (a folded one's waits in
    ``w.passes.pending``: computing its ``c`` here could re-enter a value
    being computed)."""
    assert w.passes is not None
    folds = w.passes.plan.folds
    scope, body = w.fresh("loop"), list[str]()
    parts: dict[torch.fx.Node, Part] = {}
    for r in members:
        parts[r] = _fold_part(w, r, folds[r], scope, body) if r in folds else _part(w, r, scope, body)
    for part in parts.values():
        w.lines.extend(part.init)
    w.lines.extend(w.loop_header())
    w.lines.extend(body)
    for part in parts.values():
        w.lines.extend(part.update)
    for r, part in parts.items():
        if r in folds:
            w.passes.pending[r] = part
        else:
            part.finish()
            w.memo[(r, "outer")] = part.name


def _part(w: KernelWriter, node: torch.fx.Node, scope: str, body: list[str]) -> Part:
    kind = REDUCTIONS[node.target]
    out_dtype = node.meta["val"].dtype
    val = _source_value(w, node, scope, body, "        ")
    src_dtype = node.args[0].meta["val"].dtype  # type: ignore[union-attr]
    if kind in ARG_REDUCTIONS:
        return arg_part(w, kind, val, compute_dtype(src_dtype))
    return plain_part(w, kind, _to_acc(val, src_dtype, out_dtype), compute_dtype(out_dtype))


def _fold_part(w: KernelWriter, node: torch.fx.Node, fold: Fold, scope: str, body: list[str]) -> Part:
    dtype = compute_dtype(node.meta["val"].dtype)
    x = w.operand(fold.sub, fold.x, scope, body, "        ").to(dtype)

    def row() -> str:  # after the loop, once the reductions c reads have their values
        return w.value(fold.c, "outer", w.lines, "    ")

    build = squares_part if fold.kind == "squares" else exp_part
    return build(w, x, row, dtype)
