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

The writer's parts live in their own modules: addresses (the static index
variables above, the generic ``%`` / ``//``) in
:mod:`conveyor_triton.codegen_address`, reductions (Note [Arg reductions])
in :mod:`conveyor_triton.codegen_reduce`, ``cat`` (Note [Cat in a group]) in
:mod:`conveyor_triton.codegen_cat`, scans (Note [Scans]) in
:mod:`conveyor_triton.codegen_scan`, and a split reduction's second kernel in
:mod:`conveyor_triton.codegen_combine`. The kernel's description
(:class:`KernelSource`, :class:`TensorArg`) is
:mod:`conveyor_triton.kernel_source`'s.
"""


from __future__ import annotations

from typing import cast as typed

import torch
import torch.fx

from conveyor_triton.classify import REDUCTIONS, SCANS
from conveyor_triton.codegen_address import AddressWriter
from conveyor_triton.codegen_cat import cat
from conveyor_triton.codegen_combine import generate_combine
from conveyor_triton.codegen_gather import gather
from conveyor_triton.codegen_pool import window
from conveyor_triton.codegen_reduce import Passes, reduction
from conveyor_triton.codegen_scan import scan
from conveyor_triton.dtypes import compute_dtype, from_stored, tl_type
from conveyor_triton.fusion import Group
from conveyor_triton.index_reads import INDEX_READS
from conveyor_triton.kernel_source import KernelSource, StoreStrides, TensorArg, kernel_text
from conveyor_triton.launch import Launch
from conveyor_triton.ops import RULES, SHIFTED, Value
from conveyor_triton.pooling import POOLS

__all__ = ["KernelSource", "KernelWriter", "StoreStrides", "TensorArg", "generate", "generate_combine"]


class KernelWriter(AddressWriter):
    """Writes the kernel of one fusion group: its loads, the values of its
    members in each scope, its reductions and its stores (:func:`generate`)."""

    def __init__(
        self,
        group: Group,
        stored: list[torch.fx.Node],
        index64: bool,
        launch: Launch | None,
        store_strides: StoreStrides | None,
    ) -> None:
        row_group = group.reduce is not None
        #: a split reduction's first kernel (Note [Split reductions]): each program reduces one chunk
        split = launch.split if launch is not None and row_group else 1
        super().__init__(group.reduce, "xrow" if split > 1 else "xindex")
        self.group = group
        self.stored = stored
        self.index64 = index64
        self.launch = launch
        self.split = split
        self.row_group = row_group
        self.store_strides = store_strides or {}
        self.loads: dict[tuple[torch.fx.Node, str, str], str] = {}
        self.load_args: list[TensorArg] = []
        self.memo: dict[tuple[torch.fx.Node, str], str] = {}
        #: the whole row in one tile: no loops (static kernels whose launch says so)
        self.persistent = self.row_group and launch is not None and launch.persistent
        #: a looped kernel's reduction passes, planned at its first reduction (Note [Reduction passes])
        self.passes: Passes | None = None

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
            name = reduction(self, node)
        elif node.target in INDEX_READS:
            name = gather(self, node, scope, out, indent)
        elif node.target in POOLS:
            name = window(self, node, scope, out, indent)
        elif node.target in SHIFTED:
            name = cat(self, node, scope, out, indent)
        elif node.target in SCANS:
            name = scan(self, node, scope, out, indent)
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

    def load_arg(self, arg: TensorArg) -> str:
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
        source = kernel_text(name, params, self.lines)
        return KernelSource(name, source, tuple(self.load_args), tuple(store_args), xnumel, rnumel, self.launch)  # type: ignore[arg-type]

    def store_partial(self, node: torch.fx.Node, value: str, args: list[TensorArg]) -> None:
        """A split reduction's partial result, kept in the accumulator's dtype, at
        ``xindex`` of a contiguous (chunk, row) buffer (Note [Split reductions])."""
        dtype = compute_dtype(node.meta["val"].dtype)
        numel = (self.group.rows or 1) * self.split
        args.append(TensorArg(node, (numel,), None, dtype, ((numel,), (1,))))
        self.lines.append(f"    tl.store(out{len(args) - 1} + xindex, {value}, mask=xmask)")

    def store(self, node: torch.fx.Node, value: str, scope: str, args: list[TensorArg], indent: str) -> None:
        """Store member ``node``'s ``value`` in ``scope``, its argument appended to ``args``."""
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
        self.store_at(prefix, arg, value, index, mask, scope, indent)


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
    return KernelWriter(group, stored, index64, launch, store_strides).write(name)
