"""Triton source for one fusion group.

A pointwise group is a 1-D kernel over its linear index. A row group is a
2-D kernel: ``XBLOCK`` rows per program, a loop over the row in ``RBLOCK``
chunks for each reduction (so rows of any length fit), then a last loop that
computes and stores the full-size outputs (Note [Linear index] in
``conveyor_triton.fusion``). Every load and store is masked; every tensor is
addressed through its sizes and strides, which are kernel arguments, so a new
size or layout reuses the same source. Reductions accumulate in float32 for
16-bit floats, and ``amax`` / ``amin`` propagate NaN as eager does.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.fx

from conveyor_triton.classify import REDUCTIONS
from conveyor_triton.dtypes import cast, compute_dtype, from_stored, literal, tl_type, to_stored
from conveyor_triton.fusion import Group
from conveyor_triton.ops import RULES, Value


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

    def __post_init__(self) -> None:
        if self.permute is not None and sorted(self.permute) != list(range(len(self.shape))):
            raise ValueError(f"permute {self.permute} does not fit rank {len(self.shape)}")

    @property
    def rank(self) -> int:
        return len(self.shape)


@dataclass(frozen=True)
class KernelSource:
    """Generated source and the arguments it takes, in order: each load, then
    each store (pointer, sizes after the first, strides), then ``xnumel``,
    ``rnumel`` for a row group, then the block sizes."""

    name: str
    source: str
    loads: tuple[TensorArg, ...]
    stores: tuple[TensorArg, ...]
    xnumel: int
    rnumel: int | None


_INIT = {"sum": "0", "max": 'float("-inf")', "min": 'float("inf")'}


class _Writer:
    def __init__(self, group: Group, stored: list[torch.fx.Node], index64: bool) -> None:
        self.group = group
        self.stored = stored
        self.index64 = index64
        self.lines: list[str] = []
        self.loads: dict[tuple[torch.fx.Node, str, str], str] = {}
        self.load_args: list[TensorArg] = []
        self.memo: dict[tuple[torch.fx.Node, str], str] = {}
        self.counter = 0
        self.row_group = group.reduce is not None

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
        dtype = node.meta["val"].dtype
        arg = TensorArg(node, shape, permute, dtype)
        if arg not in self.load_args:
            self.load_args.append(arg)
        prefix = f"in{self.load_args.index(arg)}"
        index, mask = self.scope_index(scope)
        off = self.offset(prefix, arg.rank, index, out, indent)
        name = self.fresh("l")
        value = from_stored(f"tl.load({prefix} + {off}, mask={mask}, other=0)", dtype)
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
        body: list[str] = []
        loop = self.fresh("loop")
        indent = "        "
        if source in self.group.members:
            val = self.value(source, loop, body, indent)  # type: ignore[arg-type]
        else:
            val = self.load(source, tuple(source.meta["val"].shape), loop, body, indent)  # type: ignore[arg-type, union-attr]
        src_dtype = source.meta["val"].dtype  # type: ignore[union-attr]
        val = cast(val, src_dtype, out_dtype) if out_dtype is not src_dtype else val
        if acc_dtype is not out_dtype:
            val = cast(val, out_dtype, acc_dtype)
        acc, name = self.fresh("acc"), self.fresh("r")
        init = _INIT[kind] if acc_dtype.is_floating_point else _int_init(kind, acc_dtype)
        self.lines.append(f"    {acc} = tl.full([XBLOCK, RBLOCK], {init}, {tl_type(acc_dtype)})")
        self.lines.append("    for r0 in range(0, rnumel, RBLOCK):")
        self.lines.append("        rindex = r0 + tl.arange(0, RBLOCK)[None, :]")
        self.lines.append("        fmask = xmask & (rindex < rnumel)")
        self.lines.append("        findex = xindex * rnumel + rindex")
        self.lines.extend(body)
        v = self.fresh("t")
        self.lines.append(f"        {v} = {val}")
        if kind == "sum":
            self.lines.append(f"        {acc} = {acc} + tl.where(fmask, {v}, 0)")
            # Triton sums narrow integers in int32: wrap back to the accumulator's type
            total = f"tl.sum({acc}, 1)" if acc_dtype.is_floating_point else f"tl.sum({acc}, 1).to({tl_type(acc_dtype)})"
            self.lines.append(f"    {name} = {total}[:, None]")
        else:
            op = ">" if kind == "max" else "<"
            nan = f" | ({v} != {v})" if acc_dtype.is_floating_point else ""
            self.lines.append(f"        {acc} = tl.where(fmask & (({v} {op} {acc}){nan}), {v}, {acc})")
            fn = "tl.max" if kind == "max" else "tl.min"
            self.lines.append(f"    {name} = {fn}({acc}, 1)[:, None]")
            if acc_dtype.is_floating_point:
                self.lines.append(
                    f"    {name} = tl.where(tl.max(({acc} != {acc}).to(tl.int32), 1)[:, None] > 0, float(\"nan\"), {name})"
                )
        return name

    # -- the kernel -------------------------------------------------------------
    def write(self, name: str) -> KernelSource:
        pid = "tl.program_id(0).to(tl.int64)" if self.index64 else "tl.program_id(0)"
        if self.row_group:
            self.lines.append(f"    xindex = {pid} * XBLOCK + tl.arange(0, XBLOCK)[:, None]")
        else:
            self.lines.append(f"    xindex = {pid} * XBLOCK + tl.arange(0, XBLOCK)")
        self.lines.append("    xmask = xindex < xnumel")
        store_args: list[TensorArg] = []
        full = [n for n in self.stored if self.group.members[n] == "full"]
        rows = [n for n in self.stored if self.group.members[n] == "row"]
        if full and self.row_group:
            body: list[str] = []
            names = [self.value(n, "final", body, "        ") for n in full]
            self.lines.append("    for r0 in range(0, rnumel, RBLOCK):")
            self.lines.append("        rindex = r0 + tl.arange(0, RBLOCK)[None, :]")
            self.lines.append("        fmask = xmask & (rindex < rnumel)")
            self.lines.append("        findex = xindex * rnumel + rindex")
            self.lines.extend(body)
            for n, v in zip(full, names):
                self.store(n, v, "final", store_args, "        ")
        else:
            for n in full:
                v = self.value(n, "outer", self.lines, "    ")
                self.store(n, v, "outer", store_args, "    ")
        for n in rows:
            v = self.value(n, "outer", self.lines, "    ")
            self.store(n, v, "outer", store_args, "    ")
        params = []
        for prefix, args in (("in", self.load_args), ("out", store_args)):
            for k, a in enumerate(args):
                params.append(f"{prefix}{k}")
                params += [f"{prefix}{k}_size{j}" for j in range(1, a.rank)]
                params += [f"{prefix}{k}_stride{j}" for j in range(a.rank)]
        params.append("xnumel")
        if self.row_group:
            params.append("rnumel")
        params.append("XBLOCK: tl.constexpr")
        if self.row_group:
            params.append("RBLOCK: tl.constexpr")
        header = ["import triton", "import triton.language as tl", "", "", "@triton.jit", f"def {name}({', '.join(params)}):"]
        source = "\n".join(header + self.lines) + "\n"
        g = self.group
        return KernelSource(
            name, source, tuple(self.load_args), tuple(store_args), g.rows if self.row_group else g.numel, g.reduce  # type: ignore[arg-type]
        )

    def store(self, node: torch.fx.Node, value: str, scope: str, args: list[TensorArg], indent: str) -> None:
        val = node.meta["val"]
        row = self.row_group and self.group.members[node] == "row"
        arg = TensorArg(node, tuple(val.shape), None if row else self.perm(scope), val.dtype)
        prefix = f"out{len(args)}"
        args.append(arg)
        index, mask = self.scope_index(scope)
        if row:
            index, mask = "xindex", "xmask"
        out = self.lines
        off = self.offset(prefix, arg.rank, index, out, indent)
        out.append(f"{indent}tl.store({prefix} + {off}, {to_stored(cast(value, val.dtype, val.dtype), val.dtype)}, mask={mask})")


def _int_init(kind: str, dtype: torch.dtype) -> str:
    if kind == "sum":
        return "0"
    info = torch.iinfo(dtype)
    return literal(info.min if kind == "max" else info.max)


def generate(group: Group, stored: list[torch.fx.Node], name: str, index64: bool) -> KernelSource:
    """The kernel for ``group`` that stores the members in ``stored``."""
    return _Writer(group, stored, index64).write(name)
