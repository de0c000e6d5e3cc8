"""Pooling windows inside a fused kernel (Note [Pooling windows] in
``conveyor_triton.pooling``), written into a
:class:`~conveyor_triton.codegen.KernelWriter`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.fx

from conveyor_triton.codegen_gather import output_coords, own_address
from conveyor_triton.dtypes import compute_dtype, from_stored, tl_type
from conveyor_triton.pooling import pool

if TYPE_CHECKING:
    from conveyor_triton.codegen import KernelWriter


def window(w: KernelWriter, node: torch.fx.Node, scope: str, out: list[str], indent: str) -> str:
    """Note [Pooling windows]: the window of the output element's (row,
    column), unrolled in row-major order, each load masked to the input; the
    sum in the accumulator's dtype, divided as eager's CPU ``avg_pool2d``
    divides (the window clipped to the padded input, or to the input when
    padding is not counted, or ``divisor_override``)."""
    p = pool(node)
    source = node.args[0]
    assert isinstance(source, torch.fx.Node)
    x = source.meta["val"]
    height, width = x.shape[-2:]
    acc = compute_dtype(x.dtype)
    coords, mask, var = output_coords(w, node, scope, out, indent)
    lead, row, col = coords[:-2], coords[-2], coords[-1]
    h0, w0, total = w.fresh("h"), w.fresh("w"), w.fresh("acc")
    out.append(f"{indent}{h0} = {row} * {p.stride[0]} - {p.padding[0]}")
    out.append(f"{indent}{w0} = {col} * {p.stride[1]} - {p.padding[1]}")
    out.append(f"{indent}{total} = tl.zeros({w.block(scope)}, {tl_type(acc)})")
    for i in range(p.kernel[0]):
        for j in range(p.kernel[1]):
            ih, iw = f"({h0} + {i})", f"({w0} + {j})"
            inside = f"({ih} >= 0) & ({ih} < {height}) & ({iw} >= 0) & ({iw} < {width})"
            prefix, addr = own_address(w, source, [*lead, ih, iw], var)
            loaded = from_stored(f"tl.load({prefix} + {addr}, mask={mask} & {inside}, other=0)", x.dtype)
            out.append(f"{indent}{total} = {total} + {loaded}")
    # eager: the window clipped to the padded input, then to the input
    h1, w1, count = w.fresh("h"), w.fresh("w"), w.fresh("n")
    out.append(f"{indent}{h1} = tl.minimum({h0} + {p.kernel[0]}, {height + p.padding[0]})")
    out.append(f"{indent}{w1} = tl.minimum({w0} + {p.kernel[1]}, {width + p.padding[1]})")
    padded = f"({h1} - {h0}) * ({w1} - {w0})"
    h0c, w0c = f"tl.maximum({h0}, 0)", f"tl.maximum({w0}, 0)"
    h1c, w1c = f"tl.minimum({h1}, {height})", f"tl.minimum({w1}, {width})"
    if p.divisor is not None:
        out.append(f"{indent}{count} = {p.divisor} + {h0} * 0")
    elif p.count_include_pad:
        out.append(f"{indent}{count} = {padded}")
    else:
        out.append(f"{indent}{count} = ({h1c} - {h0c}) * ({w1c} - {w0c})")
    name = w.fresh("v")
    empty = f"({h0c} >= {h1c}) | ({w0c} >= {w1c})"
    out.append(f"{indent}{name} = tl.where({empty}, 0.0, {total} / {count}.to({tl_type(acc)}))")
    return name
