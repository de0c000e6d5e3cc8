"""Triton source for one fusion group.

A pointwise group is a 1-D kernel over its linear index. A row group is a
2-D kernel: ``XBLOCK`` rows per program, and either the whole row in one
``RBLOCK`` tile (a *persistent* reduction: each value is loaded and computed
once), or a loop over the row in ``RBLOCK`` chunks for each reduction (so
rows of any length fit), then a last loop that computes and stores the
full-size outputs (Note [Linear index] in ``conveyor_triton.fusion``).
Every load and store is masked. Reductions accumulate in float32 for 16-bit
floats, and ``amax`` / ``amin`` propagate NaN as eager does.

Note [Static layouts]: a kernel is generated in one of two forms.

* *Static* (the default for a graph with static sizes): every size and
  stride the lowering saw is a constant of the source. Each tensor's address
  is built from per-dimension index variables (``x0 = xindex % 16``,
  ``x1 = xindex // 16``), computed once per kernel and shared by every
  operand that needs them, after size-1 dimensions are dropped and
  dimensions that are contiguous with each other merged; a contiguous
  operand is addressed with the linear index itself, a broadcast by a static
  multiple. In a row group the row and the in-row parts of an address come
  from ``xindex`` and ``rindex`` separately. Triton can then prove
  contiguity and alignment and vectorize. The kernel's only arguments are
  its tensors, and its launch (grid, blocks, ``num_warps``) is fixed at
  compile time (:mod:`conveyor_triton.launch`).
* *Generic*: sizes and strides are kernel arguments and every address is
  rebuilt from the linear index with a ``%`` and a ``//`` per dimension, so a
  new size or layout reuses the same source. The per-size programs of a
  symbolically sized graph use it (their kernels are shared across sizes:
  Note [Symbolic sizes in the triton backend]), and so does a static kernel's
  step when a value arrives with another layout than its meta value said
  (checked per launch: the static source would read it wrongly).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import cast as typed

import torch
import torch.fx

from conveyor_triton.classify import ARG_REDUCTIONS, REDUCTIONS, SCANS
from conveyor_triton.dtypes import cast, compute_dtype, from_stored, literal, tl_type, to_stored
from conveyor_triton.fusion import Group
from conveyor_triton.launch import Launch
from conveyor_triton.ops import RULES, SHIFTED, Value

#: a static kernel's strides for each value it stores
StoreStrides = dict[torch.fx.Node, tuple[int, ...]]


@dataclass(frozen=True)
class TensorArg:
    """A tensor the kernel reads or writes, and how its index space is laid out.

    :ivar node: the graph node whose run-time value it is (for a load), or the
        group member it stores.
    :ivar shape: the value's logical shape (a load expands the value to it).
    :ivar permute: the order the kernel addresses the dimensions in (Note
        [Permuted groups] in ``conveyor_triton.fusion``), or None.
    """

    node: torch.fx.Node
    shape: tuple[int, ...]
    permute: tuple[int, ...] | None
    dtype: torch.dtype
    #: the value's own sizes and strides a static kernel was generated for
    #: (Note [Static layouts]); None in a generic kernel
    layout: tuple[tuple[int, ...], tuple[int, ...]] | None = None

    def __post_init__(self) -> None:
        if self.permute is not None and sorted(self.permute) != list(range(len(self.shape))):
            raise ValueError(f"permute {self.permute} does not fit rank {len(self.shape)}")

    @property
    def rank(self) -> int:
        return len(self.shape)


@dataclass(frozen=True)
class KernelSource:
    """Generated source and the arguments it takes, in order. A generic kernel
    takes each load, then each store (pointer, sizes after the first,
    strides), then ``xnumel``, ``rnumel`` for a row group, then the block
    sizes; a static one (``launch`` set) takes each load's and store's pointer
    and the block sizes (Note [Static layouts])."""

    name: str
    source: str
    loads: tuple[TensorArg, ...]
    stores: tuple[TensorArg, ...]
    xnumel: int
    rnumel: int | None
    #: a static kernel's launch, fixed at compile time; None for a generic kernel
    launch: Launch | None = None

    @property
    def static(self) -> bool:
        return self.launch is not None


_INIT = {"sum": "0", "max": 'float("-inf")', "min": 'float("inf")'}


class _Writer:
    def __init__(
        self,
        group: Group,
        stored: list[torch.fx.Node],
        index64: bool,
        launch: Launch | None,
        store_strides: StoreStrides | None,
    ) -> None:
        self.group = group
        self.stored = stored
        self.index64 = index64
        self.launch = launch
        self.store_strides = store_strides or {}
        self.lines: list[str] = []
        self.loads: dict[tuple[torch.fx.Node, str, str], str] = {}
        self.load_args: list[TensorArg] = []
        self.memo: dict[tuple[torch.fx.Node, str], str] = {}
        self.coords: dict[tuple[str, str, int, int | None], str] = {}
        self.counter = 0
        self.row_group = group.reduce is not None
        #: the whole row in one tile: no loops (static kernels whose launch says so)
        self.persistent = self.row_group and launch is not None and launch.persistent
        #: a split reduction's first kernel (Note [Split reductions]): each program reduces one chunk
        self.split = launch.split if launch is not None and self.row_group else 1
        #: the variable a row's coordinates come from
        self.xvar = "xrow" if self.split > 1 else "xindex"

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    # -- addressing ---------------------------------------------------------
    def offset(self, prefix: str, rank: int, index: str, out: list[str], indent: str) -> str:
        if rank == 0:
            return f"({index} * 0)"
        rest, terms = index, []
        for j in range(rank - 1, 0, -1):
            c, q = self.fresh("c"), self.fresh("q")
            out.append(f"{indent}{c} = {rest} % {prefix}_size{j}")
            out.append(f"{indent}{q} = {rest} // {prefix}_size{j}")
            terms.append(f"{c} * {prefix}_stride{j}")
            rest = q
        terms.append(f"{rest} * {prefix}_stride0")
        return "(" + " + ".join(reversed(terms)) + ")"

    def coord(self, var: str, div: int, size: int | None, scope: str, out: list[str], indent: str) -> str:
        """``(var // div) % size`` as a named value, computed once per scope
        (``xindex``'s once per kernel); ``size`` None: the outermost dimension."""
        if div == 1 and size is None:
            return var
        rowwise = var in ("xindex", "xrow")
        key = ("outer" if rowwise else scope, var, div, size)
        if key not in self.coords:
            expr = var if div == 1 else f"({var} // {div})"
            if size is not None:
                expr = f"{expr} % {size}"
            name = self.fresh("x" if rowwise else "r")
            where, at = (self.lines, "    ") if rowwise else (out, indent)
            where.append(f"{at}{name} = {expr}")
            self.coords[key] = name
        return self.coords[key]

    def static_terms(
        self, dims: list[tuple[int, int]], var: str, scope: str, out: list[str], indent: str
    ) -> list[str]:
        """The address terms of ``dims`` (size, stride; row-major over ``var``)."""
        terms: list[str] = []
        div = 1
        for j in range(len(dims) - 1, -1, -1):
            size, stride = dims[j]
            if stride != 0:
                c = self.coord(var, div, None if j == 0 else size, scope, out, indent)
                terms.append(c if stride == 1 else f"{c} * {stride}")
            div *= size
        return terms[::-1]

    def static_offset(
        self, arg: TensorArg, strides: tuple[int, ...], full: bool, scope: str, out: list[str], indent: str
    ) -> str:
        """The address of ``arg`` (its value laid out with ``strides``, read at
        ``arg.shape`` in ``arg.permute`` order) in a static kernel: Note
        [Static layouts]. ``full``: in a row group's in-row scope."""
        dims, x = _dims(arg.shape, strides, arg.permute), self.xvar
        if not full:
            return " + ".join(self.static_terms(_merged(dims), x, scope, out, indent)) or f"{x} * 0"
        split = _split(dims, self.group.reduce)  # type: ignore[arg-type]
        if split is None:  # the row boundary falls inside a dimension
            return " + ".join(self.static_terms(_merged(dims), "findex", scope, out, indent)) or "findex * 0"
        outer = " + ".join(self.static_terms(_merged(dims[:split]), x, scope, out, indent)) or f"{x} * 0"
        inner = " + ".join(self.static_terms(_merged(dims[split:]), "rindex", scope, out, indent)) or "rindex * 0"
        return f"{outer} + {inner}"

    def address(self, prefix: str, arg: TensorArg, index: str, scope: str, out: list[str], indent: str) -> str:
        if arg.layout is None:
            return self.offset(prefix, arg.rank, index, out, indent)
        shape, strides = arg.layout
        expanded = _expanded(shape, strides, arg.shape)
        return "(" + self.static_offset(arg, expanded, index == "findex", scope, out, indent) + ")"

    def scope_index(self, scope: str) -> tuple[str, str]:
        if not self.row_group:
            return "xindex", "xmask"
        return ("xindex", "xmask") if scope == "outer" else ("findex", "fmask")

    def perm(self, scope: str) -> tuple[int, ...] | None:
        """The permutation full values are addressed in, in ``scope``."""
        return None if scope == "outer" else self.group.perm

    def load(self, node: torch.fx.Node, shape: tuple[int, ...], scope: str, out: list[str], indent: str) -> str:
        permute = self.perm(scope)
        key = (node, repr((permute, shape)), scope)
        if key in self.loads:
            return self.loads[key]
        val = node.meta["val"]
        layout = (tuple(val.shape), tuple(val.stride())) if self.launch is not None else None
        arg = TensorArg(node, shape, permute, val.dtype, layout)
        if arg not in self.load_args:
            self.load_args.append(arg)
        prefix = f"in{self.load_args.index(arg)}"
        index, mask = self.scope_index(scope)
        off = self.address(prefix, arg, index, scope, out, indent)
        name = self.fresh("l")
        value = from_stored(f"tl.load({prefix} + {off}, mask={mask}, other=0)", val.dtype)
        out.append(f"{indent}{name} = {value}")
        self.loads[key] = name
        return name

    # -- values ---------------------------------------------------------------
    def value(self, node: torch.fx.Node, scope: str, out: list[str], indent: str) -> str:
        """The expression name of member ``node`` in ``scope`` ("outer" for row
        values and pointwise groups, a loop name for full values of a row group)."""
        kind = self.group.members[node]
        if kind == "row" and self.row_group:
            scope, out, indent = "outer", self.lines, "    "
        key = (node, scope)
        if key in self.memo:
            return self.memo[key]
        if node.target in REDUCTIONS:
            name = self.reduction(node)
        elif node.target in SHIFTED:
            name = self.cat(node, scope, out, indent)
        elif node.target in SCANS:
            name = self.scan(node, scope, out, indent)
        elif node.target not in RULES:  # an order-keeping view: the same value
            name = self.value(node.args[0], scope, out, indent)  # type: ignore[arg-type]
        else:
            name = self.pointwise(node, scope, out, indent)
        self.memo[key] = name
        return name

    def operand(self, node: torch.fx.Node, arg: object, scope: str, out: list[str], indent: str) -> Value:
        if not isinstance(arg, torch.fx.Node):
            return Value("", None, arg)
        val = arg.meta["val"]
        if arg in self.group.members:
            return Value(self.value(arg, scope, out, indent), val.dtype, ndim=val.dim())
        shape = self.group.evaluate_at.get(node, tuple(node.meta["val"].shape))
        return Value(self.load(arg, shape, scope, out, indent), val.dtype, ndim=val.dim())

    def cat(self, node: torch.fx.Node, scope: str, out: list[str], indent: str) -> str:
        """Note [Cat in a group]: ``cat`` as a pointwise value. Its element's
        coordinate along the cat dimension says which input's segment holds it;
        each input is loaded with that condition in its mask (other elements
        read nothing) and the values are chosen with ``tl.where``, each
        converted to the output's dtype (eager's promotion). Its inputs are
        read from memory, never as members of the group (the fuser keeps them
        out: ``ops.SHIFTED``). A static kernel addresses an input as if it had
        the output's shape (its strides, shifted back by its segment's start),
        so a contiguous input stays contiguous along the rows; a generic one
        rebuilds the input's own linear index from the output's coordinates.
        Empty inputs (eager skips a 1-D tensor of size 0 of any rank) load
        nothing."""
        val = node.meta["val"]
        out_shape, rank = tuple(val.shape), val.dim()
        dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
        d = typed(int, dim) % rank
        at = self.group.evaluate_at.get(node, out_shape)
        d_at = d + len(at) - rank
        index, mask = self.scope_index(scope)
        if self.group.members[node] == "row" and self.row_group:
            index, mask = "xindex", "xmask"
        var = self.xvar if index == "xindex" else index
        permute = self.perm(scope)
        order = list(permute) if permute is not None else list(range(len(at)))

        def coordinate(j: int) -> str:
            pos = order.index(j)
            div = 1
            for p in order[pos + 1 :]:
                div *= at[p]
            return self.coord(var, div, at[j], scope, out, indent)

        parts: list[tuple[int, torch.fx.Node]] = []
        start = 0
        for a in typed(list, node.args[0]):
            shape = tuple(a.meta["val"].shape)
            if len(shape) != rank or shape[d] == 0:
                continue  # empty: no segment
            parts.append((start, a))
            start += shape[d]
        c = coordinate(d_at) if out_shape[d] == at[d_at] and len(parts) > 1 else "0"
        result: str | None = None
        for k in range(len(parts) - 1, -1, -1):
            lo, a = parts[k]
            a_val = a.meta["val"]
            hi = lo + a_val.shape[d]
            conds = [mask]
            if k > 0:
                conds.append(f"({c} >= {lo})")
            if k < len(parts) - 1:
                conds.append(f"({c} < {hi})")
            if self.launch is not None:
                own = (tuple(a_val.shape), tuple(a_val.stride()))
                arg = TensorArg(a, at, permute, a_val.dtype, own)
                prefix = self._load_arg(arg)
                off = self.address(prefix, arg, index, scope, out, indent)
                shift = lo * _expanded(own[0], own[1], at)[d_at]
                addr = f"{prefix} + {off}" + (f" - {shift}" if shift else "")
            else:
                arg = TensorArg(a, tuple(a_val.shape), None, a_val.dtype)
                prefix = self._load_arg(arg)
                terms, step = [], 1
                pad = len(at) - rank
                for j in range(len(at) - 1, pad - 1, -1):
                    size = a_val.shape[j - pad]
                    if size != 1:
                        cj = coordinate(j) if j != d_at else f"({c} - {lo})"
                        terms.append(cj if step == 1 else f"{cj} * {step}")
                    step *= size
                li = self.fresh("i")
                out.append(f"{indent}{li} = {' + '.join(terms) or f'{var} * 0'}")
                addr = f"{prefix} + {self.offset(prefix, arg.rank, li, out, indent)}"
            name = self.fresh("l")
            loaded = from_stored(f"tl.load({addr}, mask={' & '.join(conds)}, other=0)", a_val.dtype)
            out.append(f"{indent}{name} = {Value(loaded, a_val.dtype).to(compute_dtype(val.dtype))}")
            result = name if result is None else f"tl.where({c} < {hi}, {name}, {result})"
        if result is None:  # every input empty: the output is too, no element is read
            result = f"tl.zeros({self.block(scope)}, {tl_type(compute_dtype(val.dtype))})"
        name = self.fresh("v")
        out.append(f"{indent}{name} = {result}")
        return name

    def scan(self, node: torch.fx.Node, scope: str, out: list[str], indent: str) -> str:
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
        if source in self.group.members:
            val = self.value(source, scope, out, indent)  # type: ignore[arg-type]
        else:
            val = self.load(source, tuple(source.meta["val"].shape), scope, out, indent)  # type: ignore[arg-type, union-attr]
        src_dtype = source.meta["val"].dtype  # type: ignore[union-attr]
        v, name = self.fresh("t"), self.fresh("s")
        out.append(f"{indent}{v} = tl.where(fmask, {Value(val, src_dtype).to(dtype)}, 0)")
        if self.persistent:
            out.append(f"{indent}{name} = tl.cumsum({v}, 1)")
            return name
        carry = self.fresh("carry")
        self.lines.append(f"    {carry} = tl.zeros([XBLOCK, 1], {tl_type(dtype)})")
        out.append(f"{indent}{name} = tl.cumsum({v}, 1) + {carry}")
        out.append(f"{indent}{carry} = {carry} + tl.sum({v}, 1)[:, None]")
        return name

    def _load_arg(self, arg: TensorArg) -> str:
        if arg not in self.load_args:
            self.load_args.append(arg)
        return f"in{self.load_args.index(arg)}"

    def block(self, scope: str) -> str:
        if not self.row_group:
            return "[XBLOCK]"
        return "[XBLOCK, 1]" if scope == "outer" else "[XBLOCK, RBLOCK]"

    def pointwise(self, node: torch.fx.Node, scope: str, out: list[str], indent: str) -> str:
        rule = RULES[node.target]
        operands = [self.operand(node, node.args[i] if i < len(node.args) else None, scope, out, indent) for i in rule.reads]
        dtype = node.meta["val"].dtype
        expr = rule.emit(operands, node, dtype)
        if expr is None:
            raise AssertionError(f"{node.target} declined after classification accepted it")
        if not rule.reads:
            expr = f"tl.full({self.block(scope)}, {expr}, {tl_type(compute_dtype(dtype))})"
        name = self.fresh("v")
        out.append(f"{indent}{name} = {expr}")
        return name

    def reduction(self, node: torch.fx.Node) -> str:
        kind = REDUCTIONS[node.target]
        source = node.args[0]
        out_dtype = node.meta["val"].dtype
        acc_dtype = compute_dtype(out_dtype)
        if self.persistent:  # the row is one tile: its values are computed once, in the kernel's body
            body, loop, indent = self.lines, "row", "    "
        else:
            body, loop, indent = [], self.fresh("loop"), "        "
        if source in self.group.members:
            val = self.value(source, loop, body, indent)  # type: ignore[arg-type]
        else:
            val = self.load(source, tuple(source.meta["val"].shape), loop, body, indent)  # type: ignore[arg-type, union-attr]
        src_dtype = source.meta["val"].dtype  # type: ignore[union-attr]
        if kind in ARG_REDUCTIONS:
            return self.arg_reduction(kind, val, compute_dtype(src_dtype), body)
        val = cast(val, src_dtype, out_dtype) if out_dtype is not src_dtype else val
        if acc_dtype is not out_dtype:
            val = cast(val, out_dtype, acc_dtype)
        acc, name, v = self.fresh("acc"), self.fresh("r"), self.fresh("t")
        init = _INIT[kind] if acc_dtype.is_floating_point else _int_init(kind, acc_dtype)
        if self.persistent:
            self.lines.append(f"    {v} = {val}")
            masked = f"tl.where(fmask, {v}, {'0' if kind == 'sum' else init})"
            self.lines.append(f"    {acc} = {masked}")
        else:
            self.lines.append(f"    {acc} = tl.full([XBLOCK, RBLOCK], {init}, {tl_type(acc_dtype)})")
            self.lines.extend(self.loop_header())
            self.lines.extend(body)
            self.lines.append(f"        {v} = {val}")
            if kind == "sum":
                self.lines.append(f"        {acc} = {acc} + tl.where(fmask, {v}, 0)")
            else:
                op = ">" if kind == "max" else "<"
                nan = f" | ({v} != {v})" if acc_dtype.is_floating_point else ""
                self.lines.append(f"        {acc} = tl.where(fmask & (({v} {op} {acc}){nan}), {v}, {acc})")
        if kind == "sum":
            # Triton sums narrow integers in int32: wrap back to the accumulator's type
            total = f"tl.sum({acc}, 1)" if acc_dtype.is_floating_point else f"tl.sum({acc}, 1).to({tl_type(acc_dtype)})"
            self.lines.append(f"    {name} = {total}[:, None]")
        else:
            fn = "tl.max" if kind == "max" else "tl.min"
            self.lines.append(f"    {name} = {fn}({acc}, 1)[:, None]")
            if acc_dtype.is_floating_point:
                self.lines.append(
                    f"    {name} = tl.where(tl.max(({acc} != {acc}).to(tl.int32), 1)[:, None] > 0, float(\"nan\"), {name})"
                )
        return name

    def arg_reduction(self, kind: str, val: str, dtype: torch.dtype, body: list[str]) -> str:
        """Note [Arg reductions]: ``argmax`` / ``argmin`` as eager computes them:
        the index of the first extreme value of the row, a NaN counting as the
        extreme (the first NaN wins). Each lane of the tile keeps its best value
        and that value's index (``rnumel``: none yet); chunks come in index
        order, so a lane replaces its value only by a strictly better one and
        keeps the first of equals. The row's result is then the smallest index
        among the lanes holding the row's extreme (a NaN if the row has one),
        two plain ``tl.max`` / ``tl.min`` reductions; Triton's ``tl.argmax``
        is not used (its NaN handling is not eager's)."""
        acc, idx, name, v, ext = self.fresh("acc"), self.fresh("idx"), self.fresh("r"), self.fresh("t"), self.fresh("m")
        floating = dtype.is_floating_point
        op = ">" if kind == "argmax" else "<"
        init = _INIT[kind[3:]] if floating else _int_init(kind[3:], dtype)
        if self.persistent:
            self.lines.append(f"    {v} = {val}")
            self.lines.append(f"    {acc} = tl.where(fmask, {v}, {init})")
            self.lines.append(f"    {idx} = tl.where(fmask, rindex, rnumel)")
        else:
            index = "tl.int64" if self.index64 else "tl.int32"
            take = self.fresh("take")
            self.lines.append(f"    {acc} = tl.full([XBLOCK, RBLOCK], {init}, {tl_type(dtype)})")
            self.lines.append(f"    {idx} = tl.zeros([XBLOCK, RBLOCK], {index}) + rnumel")
            self.lines.extend(self.loop_header())
            self.lines.extend(body)
            self.lines.append(f"        {v} = {val}")
            better = f"({v} {op} {acc})"
            if floating:  # a NaN replaces a number, nothing replaces a NaN
                better = f"((({v} {op} {acc}) | ({v} != {v})) & ({acc} == {acc}))"
            self.lines.append(f"        {take} = fmask & ({better} | ({idx} == rnumel))")
            self.lines.append(f"        {acc} = tl.where({take}, {v}, {acc})")
            self.lines.append(f"        {idx} = tl.where({take}, rindex, {idx})")
        fn = "tl.max" if kind == "argmax" else "tl.min"
        self.lines.append(f"    {ext} = {fn}({acc}, 1)[:, None]")
        hit = f"({acc} == {ext})"
        if floating:
            nan = f"(tl.max(({acc} != {acc}).to(tl.int32), 1)[:, None] > 0)"
            hit = f"tl.where({nan}, {acc} != {acc}, {hit})"
        self.lines.append(f"    {name} = tl.min(tl.where(({idx} < rnumel) & {hit}, {idx}, rnumel), 1)[:, None].to(tl.int64)")
        return name

    def loop_header(self) -> list[str]:
        """The lines opening a loop over the row (a split's chunk of it) in ``RBLOCK`` chunks."""
        rindex = "r0 + tl.arange(0, RBLOCK)[None, :]"
        end = "rnumel"
        if self.split > 1:
            chunk = self.launch.chunk  # type: ignore[union-attr]
            rindex, end = f"xsplit * {chunk} + {rindex}", str(chunk)
        if self.index64 and self.launch is not None:  # static in-row terms multiply by constant strides
            rindex = f"({rindex}).to(tl.int64)"
        return [
            f"    for r0 in range(0, {end}, RBLOCK):",
            f"        rindex = {rindex}",
            "        fmask = xmask & (rindex < rnumel)",
            f"        findex = {self.xvar} * rnumel + rindex",
        ]

    # -- the kernel -------------------------------------------------------------
    def write(self, name: str) -> KernelSource:
        g = self.group
        xnumel, rnumel = typed(int, g.rows if self.row_group else g.numel), g.reduce
        if self.launch is not None:  # Note [Static layouts]: sizes are constants of the source
            self.lines.append(f"    xnumel = {xnumel * self.split}")
            if self.row_group:
                self.lines.append(f"    rnumel = {rnumel}")
        pid = "tl.program_id(0).to(tl.int64)" if self.index64 else "tl.program_id(0)"
        if self.row_group:
            self.lines.append(f"    xindex = {pid} * XBLOCK + tl.arange(0, XBLOCK)[:, None]")
        else:
            self.lines.append(f"    xindex = {pid} * XBLOCK + tl.arange(0, XBLOCK)")
        self.lines.append("    xmask = xindex < xnumel")
        if self.split > 1:  # Note [Split reductions]: program-adjacent indexes are adjacent rows
            self.lines.append(f"    xrow = xindex % {xnumel}")
            self.lines.append(f"    xsplit = xindex // {xnumel}")
        if self.persistent:
            rindex = "tl.arange(0, RBLOCK)[None, :]"
            self.lines.append(f"    rindex = {rindex}.to(tl.int64)" if self.index64 else f"    rindex = {rindex}")
            self.lines.append("    fmask = xmask & (rindex < rnumel)")
            self.lines.append("    findex = xindex * rnumel + rindex")
        store_args: list[TensorArg] = []
        full = [n for n in self.stored if self.group.members[n] == "full"]
        rows = [n for n in self.stored if self.group.members[n] == "row"]
        if full and self.row_group and not self.persistent:
            body: list[str] = []
            names = [self.value(n, "final", body, "        ") for n in full]
            self.lines.extend(self.loop_header())
            self.lines.extend(body)
            for n, v in zip(full, names):
                self.store(n, v, "final", store_args, "        ")
        elif full and self.persistent:
            for n in full:
                self.store(n, self.value(n, "row", self.lines, "    "), "row", store_args, "    ")
        else:
            for n in full:
                v = self.value(n, "outer", self.lines, "    ")
                self.store(n, v, "outer", store_args, "    ")
        for n in rows:
            v = self.value(n, "outer", self.lines, "    ")
            if self.split > 1:
                self.store_partial(n, v, store_args)
            else:
                self.store(n, v, "outer", store_args, "    ")
        params = []
        for prefix, args in (("in", self.load_args), ("out", store_args)):
            for k, a in enumerate(args):
                params.append(f"{prefix}{k}")
                if self.launch is None:
                    params += [f"{prefix}{k}_size{j}" for j in range(1, a.rank)]
                    params += [f"{prefix}{k}_stride{j}" for j in range(a.rank)]
        if self.launch is None:
            params.append("xnumel")
            if self.row_group:
                params.append("rnumel")
        params.append("XBLOCK: tl.constexpr")
        if self.row_group:
            params.append("RBLOCK: tl.constexpr")
        header = ["import triton", "import triton.language as tl", "", "", "@triton.jit", f"def {name}({', '.join(params)}):"]
        source = "\n".join(header + self.lines) + "\n"
        return KernelSource(name, source, tuple(self.load_args), tuple(store_args), xnumel, rnumel, self.launch)  # type: ignore[arg-type]

    def store_partial(self, node: torch.fx.Node, value: str, args: list[TensorArg]) -> None:
        """A split reduction's partial result, kept in the accumulator's dtype, at
        ``xindex`` of a contiguous (chunk, row) buffer (Note [Split reductions])."""
        dtype = compute_dtype(node.meta["val"].dtype)
        numel = (self.group.rows or 1) * self.split
        args.append(TensorArg(node, (numel,), None, dtype, ((numel,), (1,))))
        self.lines.append(f"    tl.store(out{len(args) - 1} + xindex, {value}, mask=xmask)")

    def store(self, node: torch.fx.Node, value: str, scope: str, args: list[TensorArg], indent: str) -> None:
        val = node.meta["val"]
        row = self.row_group and self.group.members[node] == "row"
        layout = None
        if self.launch is not None:
            layout = (tuple(val.shape), self.store_strides[node])
        arg = TensorArg(node, tuple(val.shape), None if row else self.perm(scope), val.dtype, layout)
        prefix = f"out{len(args)}"
        args.append(arg)
        index, mask = self.scope_index(scope)
        if row:
            index, mask = "xindex", "xmask"
        out = self.lines
        off = self.address(prefix, arg, index, scope, out, indent)
        out.append(f"{indent}tl.store({prefix} + {off}, {to_stored(cast(value, val.dtype, val.dtype), val.dtype)}, mask={mask})")


def _dims(shape: tuple[int, ...], strides: tuple[int, ...], permute: tuple[int, ...] | None) -> list[tuple[int, int]]:
    """(size, stride) per dimension in addressing order, size-1 dimensions dropped."""
    if permute is not None:
        shape, strides = tuple(shape[p] for p in permute), tuple(strides[p] for p in permute)
    return [(size, stride) for size, stride in zip(shape, strides) if size != 1]


def _merged(dims: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``dims`` with each dimension folded into the one before it when they are
    contiguous with each other (a contiguous tensor is one dimension of stride 1,
    a broadcast run one of stride 0)."""
    out: list[tuple[int, int]] = []
    for size, stride in dims:
        if out and out[-1][1] == stride * size:
            out[-1] = (out[-1][0] * size, stride)
        else:
            out.append((size, stride))
    return out


def _split(dims: list[tuple[int, int]], reduce: int) -> int | None:
    """The position in ``dims`` where the in-row dimensions (``reduce``
    elements, trailing) begin, or None when the row boundary is inside one."""
    inner = 1
    for k in range(len(dims), -1, -1):
        if inner == reduce:
            return k
        if k == 0 or inner > reduce:
            return None
        inner *= dims[k - 1][0]
    return None


def _expanded(shape: tuple[int, ...], strides: tuple[int, ...], to: tuple[int, ...]) -> tuple[int, ...]:
    """The strides of a value of ``shape`` and ``strides`` expanded to ``to``."""
    pad = len(to) - len(shape)
    padded = ((1,) * pad + shape, (0,) * pad + strides)
    return tuple(0 if s == 1 and t != 1 else st for s, st, t in zip(*padded, to))


def _int_init(kind: str, dtype: torch.dtype) -> str:
    if kind == "sum":
        return "0"
    info = torch.iinfo(dtype)
    return literal(info.min if kind == "max" else info.max)


def generate_combine(
    group: Group, stored: list[torch.fx.Node], name: str, launch: Launch, split: Launch, store_strides: StoreStrides
) -> KernelSource:
    """The second kernel of a split reduction (Note [Split reductions]): each
    row's ``split.split`` partial results, read from the first kernel's
    (chunk, row) buffers, reduced and stored as the group's outputs."""
    w = _Writer(group, stored, False, launch, store_strides)
    rows, parts = group.rows or 1, split.split
    w.lines += [
        f"    xnumel = {rows}",
        "    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:, None]",
        "    xmask = xindex < xnumel",
        "    rindex = tl.arange(0, RBLOCK)[None, :]",
        f"    fmask = xmask & (rindex < {parts})",
    ]
    loads: list[TensorArg] = []
    stores: list[TensorArg] = []
    for k, node in enumerate(stored):
        kind = REDUCTIONS[node.target]
        out_dtype = node.meta["val"].dtype
        acc_dtype = compute_dtype(out_dtype)
        loads.append(TensorArg(node, (rows * parts,), None, acc_dtype, ((rows * parts,), (1,))))
        p, acc, r = w.fresh("p"), w.fresh("acc"), w.fresh("r")
        w.lines.append(f"    {p} = tl.load(in{k} + rindex * {rows} + xindex, mask=fmask, other=0)")
        if kind == "sum":
            w.lines.append(f"    {acc} = tl.where(fmask, {p}, 0)")
            total = f"tl.sum({acc}, 1)" if acc_dtype.is_floating_point else f"tl.sum({acc}, 1).to({tl_type(acc_dtype)})"
            w.lines.append(f"    {r} = {total}[:, None]")
        else:
            init = _INIT[kind] if acc_dtype.is_floating_point else _int_init(kind, acc_dtype)
            w.lines.append(f"    {acc} = tl.where(fmask, {p}, {init})")
            w.lines.append(f"    {r} = {'tl.max' if kind == 'max' else 'tl.min'}({acc}, 1)[:, None]")
            if acc_dtype.is_floating_point:
                w.lines.append(
                    f"    {r} = tl.where(tl.max(({acc} != {acc}).to(tl.int32), 1)[:, None] > 0, float(\"nan\"), {r})"
                )
        w.store(node, r, "outer", stores, "    ")
    params = [f"in{k}" for k in range(len(loads))] + [f"out{k}" for k in range(len(stores))]
    params += ["XBLOCK: tl.constexpr", "RBLOCK: tl.constexpr"]
    header = ["import triton", "import triton.language as tl", "", "", "@triton.jit", f"def {name}({', '.join(params)}):"]
    source = "\n".join(header + w.lines) + "\n"
    return KernelSource(name, source, tuple(loads), tuple(stores), rows, parts, launch)


def generate(
    group: Group,
    stored: list[torch.fx.Node],
    name: str,
    index64: bool,
    launch: Launch | None = None,
    store_strides: StoreStrides | None = None,
) -> KernelSource:
    """The kernel for ``group`` that stores the members in ``stored``: static
    when ``launch`` is given (the stored values laid out with ``store_strides``,
    every loaded value as its meta value says), generic otherwise (Note
    [Static layouts])."""
    if launch is not None and store_strides is None:
        raise ValueError("a static kernel needs the strides of the values it stores")
    return _Writer(group, stored, index64, launch, store_strides).write(name)
