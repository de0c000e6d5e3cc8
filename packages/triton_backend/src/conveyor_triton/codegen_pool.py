"""Pooling windows inside a fused kernel (Note [Pooling windows] in
``conveyor_triton.pooling``), written into a
:class:`~conveyor_triton.codegen.KernelWriter`."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
import torch.fx

from conveyor_triton.codegen_gather import output_coords, own_address
from conveyor_triton.dtypes import cast, compute_dtype, from_stored, tl_type
from conveyor_triton.pooling import Pool, pool

if TYPE_CHECKING:
    from conveyor_triton.codegen import KernelWriter


def window(w: KernelWriter, node: torch.fx.Node, scope: str, out: list[str], indent: str) -> str:
    """Note [Pooling windows]: the value of pooling op ``node`` (a forward
    window, or a backward's sum over the windows holding the element)."""
    kind = pool(node).kind
    if kind == "avg":
        return _forward(w, node, scope, out, indent)
    if kind in ("max", "max_index"):
        return _max_forward(w, node, scope, out, indent)
    return _backward(w, node, scope, out, indent)


def _forward(w: KernelWriter, node: torch.fx.Node, scope: str, out: list[str], indent: str) -> str:
    """The window of the output element's (row,
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
    coords, mask, var = _coords(w, node, scope, out, indent)
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
    count, empty = _divisor(w, p, h0, w0, (height, width), out, indent)
    name = w.fresh("v")
    out.append(f"{indent}{name} = tl.where({empty}, 0.0, {total} / {count}.to({tl_type(acc)}))")
    return name


def _max_forward(w: KernelWriter, node: torch.fx.Node, scope: str, out: list[str], indent: str) -> str:
    """The maximum of the window (``max_pool2d_values``) or its index in the
    input's plane (``max_pool2d_indices``), the window walked as eager's
    kernel walks it: an element inside the input replaces the running
    maximum when it is greater, or NaN, or the first inside the input."""
    p = pool(node)
    source = node.args[0]
    assert isinstance(source, torch.fx.Node)
    x = source.meta["val"]
    height, width = x.shape[-2:]
    acc = compute_dtype(x.dtype)
    coords, mask, var = _coords(w, node, scope, out, indent)
    lead, row, col = coords[:-2], coords[-2], coords[-1]
    h0, w0, best, where, seen = w.fresh("h"), w.fresh("w"), w.fresh("m"), w.fresh("i"), w.fresh("seen")
    block = w.block(scope)
    out.append(f"{indent}{h0} = {row} * {p.stride[0]} - {p.padding[0]}")
    out.append(f"{indent}{w0} = {col} * {p.stride[1]} - {p.padding[1]}")
    out.append(f'{indent}{best} = tl.full({block}, float("-inf"), {tl_type(acc)})')
    out.append(f"{indent}{where} = tl.zeros({block}, tl.int64)")
    out.append(f"{indent}{seen} = tl.zeros({block}, tl.int32)")
    for i in range(p.kernel[0]):
        for j in range(p.kernel[1]):
            ih, iw = f"({h0} + {i * p.dilation[0]})", f"({w0} + {j * p.dilation[1]})"
            inside, v, take = w.fresh("in"), w.fresh("t"), w.fresh("take")
            out.append(f"{indent}{inside} = ({ih} >= 0) & ({ih} < {height}) & ({iw} >= 0) & ({iw} < {width})")
            prefix, addr = own_address(w, source, [*lead, ih, iw], var)
            out.append(f"{indent}{v} = {from_stored(f'tl.load({prefix} + {addr}, mask={mask} & {inside}, other=0)', x.dtype)}")
            out.append(f"{indent}{take} = {inside} & (({v} > {best}) | ({v} != {v}) | ({seen} == 0))")
            out.append(f"{indent}{best} = tl.where({take}, {v}, {best})")
            out.append(f"{indent}{where} = tl.where({take}, ({ih} * {width} + {iw}).to(tl.int64), {where})")
            out.append(f"{indent}{seen} = tl.where({inside}, 1, {seen})")
    return best if p.kind == "max" else where


def _coords(w: KernelWriter, node: torch.fx.Node, scope: str, out: list[str], indent: str) -> tuple[list[str], str, str]:
    """``output_coords`` with the (row, column) coordinates always tensors
    (a size-1 dimension's "0" would make the window's masks Python bools)."""
    coords, mask, var = output_coords(w, node, scope, out, indent)
    coords[-2:] = [c if c != "0" else f"({var} * 0)" for c in coords[-2:]]
    return coords, mask, var


def _divisor(
    w: KernelWriter, p: Pool, h0: str, w0: str, size: tuple[int, int], out: list[str], indent: str
) -> tuple[str, str]:
    """The divisor of the window starting at (``h0``, ``w0``) (padding
    included) as eager's CPU ``avg_pool2d`` computes it (the window clipped to
    the padded input, then to the input), and whether it holds no input element."""
    height, width = size
    h1, w1, count = w.fresh("h"), w.fresh("w"), w.fresh("n")
    out.append(f"{indent}{h1} = tl.minimum({h0} + {p.kernel[0]}, {height + p.padding[0]})")
    out.append(f"{indent}{w1} = tl.minimum({w0} + {p.kernel[1]}, {width + p.padding[1]})")
    h0c, w0c = f"tl.maximum({h0}, 0)", f"tl.maximum({w0}, 0)"
    h1c, w1c = f"tl.minimum({h1}, {height})", f"tl.minimum({w1}, {width})"
    if p.divisor is not None:
        out.append(f"{indent}{count} = {p.divisor} + {h0} * 0")
    elif p.count_include_pad:
        out.append(f"{indent}{count} = ({h1} - {h0}) * ({w1} - {w0})")
    else:
        out.append(f"{indent}{count} = ({h1c} - {h0c}) * ({w1c} - {w0c})")
    return count, f"(({h0c} >= {h1c}) | ({w0c} >= {w1c}))"


def _backward(w: KernelWriter, node: torch.fx.Node, scope: str, out: list[str], indent: str) -> str:
    """An input-gradient element, the sum over the
    windows that hold it (window offsets in reverse: output elements in
    row-major order, eager's order) of the output gradient, divided by the
    window's divisor (``avg_pool2d_backward``) or where the window's saved
    index is this element's (``max_pool2d_with_indices_backward``). A 16-bit
    gradient rounds each quotient and each sum to its dtype, as eager's
    kernel, which adds in that dtype."""
    p = pool(node)
    grad = node.args[0]
    assert isinstance(grad, torch.fx.Node)
    g = grad.meta["val"]
    height, width = node.meta["val"].shape[-2:]
    rows, cols = g.shape[-2:]
    acc = compute_dtype(g.dtype)
    coords, mask, var = _coords(w, node, scope, out, indent)
    lead, h, col = coords[:-2], coords[-2], coords[-1]
    total = w.fresh("acc")
    out.append(f"{indent}{total} = tl.zeros({w.block(scope)}, {tl_type(acc)})")
    for i in range(p.kernel[0] - 1, -1, -1):
        nh = _numerator(w, h, p.padding[0] - i * p.dilation[0], out, indent)
        oh, ok_h = _output(nh, p.stride[0], rows)
        for j in range(p.kernel[1] - 1, -1, -1):
            nw = _numerator(w, col, p.padding[1] - j * p.dilation[1], out, indent)
            ow, ok_w = _output(nw, p.stride[1], cols)
            ok = w.fresh("ok")
            out.append(f"{indent}{ok} = {mask} & {ok_h} & {ok_w}")
            prefix, addr = own_address(w, grad, [*lead, oh, ow], var)
            term = w.fresh("t")
            out.append(f"{indent}{term} = {from_stored(f'tl.load({prefix} + {addr}, mask={ok}, other=0)', g.dtype)}")
            if p.kind == "max_backward":
                indices = node.args[7]
                assert isinstance(indices, torch.fx.Node)
                prefix, addr = own_address(w, indices, [*lead, oh, ow], var)
                hit = f"(tl.load({prefix} + {addr}, mask={ok}, other=-1) == {h} * {width} + {col})"
                out.append(f"{indent}{total} = {cast(f'{total} + tl.where({ok} & {hit}, {term}, 0.0)', acc, g.dtype)}")
            else:
                h0, w0 = w.fresh("h"), w.fresh("w")
                out.append(f"{indent}{h0} = {oh} * {p.stride[0]} - {p.padding[0]}")
                out.append(f"{indent}{w0} = {ow} * {p.stride[1]} - {p.padding[1]}")
                count, _ = _divisor(w, p, h0, w0, (height, width), out, indent)
                delta = cast(f"{term} / {count}.to({tl_type(acc)})", acc, g.dtype)
                out.append(f"{indent}{total} = {cast(f'{total} + tl.where({ok}, {delta}, 0.0)', acc, g.dtype)}")
    return total


def _numerator(w: KernelWriter, coord: str, shift: int, out: list[str], indent: str) -> str:
    """``coord + shift`` as a named value (``shift``: the padding less the window offset)."""
    if shift == 0:
        return coord
    name = w.fresh("n")
    out.append(f"{indent}{name} = {coord} + {shift}")
    return name


def _output(numerator: str, stride: int, size: int) -> tuple[str, str]:
    """The output coordinate ``numerator / stride`` and whether it is one (it
    divides, and falls in ``[0, size)``)."""
    if stride == 1:
        return numerator, f"({numerator} >= 0) & ({numerator} < {size})"
    return f"({numerator} // {stride})", f"({numerator} >= 0) & ({numerator} % {stride} == 0) & ({numerator} < {size * stride})"
