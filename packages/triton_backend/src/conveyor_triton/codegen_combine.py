"""The second kernel of a split reduction (Note [Split reductions] in
``conveyor_triton.launch``): it reduces each row's partial results, which the
first kernel (:func:`conveyor_triton.codegen.generate` with a split launch)
stored per (chunk, row), and stores the group's outputs."""

from __future__ import annotations

import torch.fx

from conveyor_triton.classify import REDUCTIONS
from conveyor_triton.codegen_accumulate import init, row_result
from conveyor_triton.codegen_address import AddressWriter
from conveyor_triton.dtypes import compute_dtype
from conveyor_triton.fusion import Group
from conveyor_triton.kernel_source import KernelSource, StoreStrides, TensorArg, kernel_text
from conveyor_triton.launch import Launch


def generate_combine(
    group: Group, stored: list[torch.fx.Node], name: str, launch: Launch, split: Launch, store_strides: StoreStrides
) -> KernelSource:
    """The second kernel of a split reduction (Note [Split reductions]): each
    row's ``split.split`` partial results, read from the first kernel's
    (chunk, row) buffers, reduced and stored as the group's outputs."""
    w = AddressWriter(group.reduce, "xindex")
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
        val = node.meta["val"]
        acc_dtype = compute_dtype(val.dtype)
        loads.append(TensorArg(node, (rows * parts,), None, acc_dtype, ((rows * parts,), (1,))))
        p, acc, r = w.fresh("p"), w.fresh("acc"), w.fresh("r")
        w.lines.append(f"    {p} = tl.load(in{k} + rindex * {rows} + xindex, mask=fmask, other=0)")
        w.lines.append(f"    {acc} = tl.where(fmask, {p}, {init(kind, acc_dtype)})")
        w.lines.extend(row_result(kind, acc, r, acc_dtype))
        out = TensorArg(node, tuple(val.shape), None, val.dtype, (tuple(val.shape), store_strides[node]))
        stores.append(out)
        w.store_at(f"out{len(stores) - 1}", out, r, "xindex", "xmask", "outer", "    ")
    params = [f"in{k}" for k in range(len(loads))] + [f"out{k}" for k in range(len(stores))]
    params += ["XBLOCK: tl.constexpr", "RBLOCK: tl.constexpr"]
    return KernelSource(name, kernel_text(name, params, w.lines), tuple(loads), tuple(stores), rows, parts, launch)
