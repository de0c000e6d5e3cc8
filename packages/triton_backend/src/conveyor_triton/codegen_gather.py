"""Reads at computed indexes (Note [Index reads] in
``conveyor_triton.index_reads``) and pooling windows (Note [Pooling
windows] in ``conveyor_triton.pooling``) inside a fused kernel, written into
a :class:`~conveyor_triton.codegen.KernelWriter`.

Both are values at an output element that read their inputs at addresses
computed from that element's coordinates, not at its linear index:
:func:`output_coords` names the coordinates, :func:`own_address` builds an
input's address from coordinates of its own dimensions (its strides
constants of a static kernel, arguments of a generic one).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, cast

import torch
import torch.fx

from conveyor_triton.codegen_address import scope_coordinates
from conveyor_triton.dtypes import from_stored
from conveyor_triton.index_reads import index_read
from conveyor_triton.kernel_source import TensorArg

if TYPE_CHECKING:
    from conveyor_triton.codegen import KernelWriter


def output_coords(w: KernelWriter, node: torch.fx.Node, scope: str, out: list[str], indent: str) -> tuple[list[str], str, str]:
    """The coordinates of the element of ``node`` the kernel computes in
    ``scope``, one expression per dimension of ``node``'s value ("0" for a
    size-1 dimension), its mask, and the index variable they come from (for
    a shaped zero: ``var * 0``)."""
    out_shape = tuple(node.meta["val"].shape)
    at, _, mask, var, coordinate = scope_coordinates(w, node, scope, out, indent)
    pad = len(at) - len(out_shape)
    return [("0" if out_shape[j] == 1 else coordinate(j + pad)) for j in range(len(out_shape))], mask, var


def own_address(w: KernelWriter, node: torch.fx.Node, coords: Sequence[str], var: str) -> tuple[str, str]:
    """The load argument's name of input ``node`` (addressed in its own
    shape and strides) and the address of its element at ``coords``, one
    per dimension (Note [Static layouts] in ``conveyor_triton.codegen``)."""
    val = node.meta["val"]
    shape, strides = tuple(val.shape), tuple(val.stride())
    layout = (shape, strides) if w.launch is not None else None
    prefix = w.load_arg(TensorArg(node, shape, None, val.dtype, layout))
    terms = []
    for j, c in enumerate(coords):
        if c == "0" or (layout is not None and (strides[j] == 0 or shape[j] == 1)):
            continue
        stride = f"{prefix}_stride{j}" if layout is None else str(strides[j])
        terms.append(c if stride == "1" else f"{c} * {stride}")
    return prefix, " + ".join(terms) or f"{var} * 0"


def gather(w: KernelWriter, node: torch.fx.Node, scope: str, out: list[str], indent: str) -> str:
    """Note [Index reads]: the index's element at the output's coordinates
    (those of ``IndexRead.index_dims``), counted from the end when negative
    (``aten.index``), checked against the source's size (a masked load,
    and a device assert for Triton's debug mode), then the source's element
    at the output's coordinates with the index in the picked dimension."""
    coords, mask, var = output_coords(w, node, scope, out, indent)
    return gather_at(w, node, coords, mask, var, scope, out, indent)


def gather_at(
    w: KernelWriter,
    node: torch.fx.Node,
    coords: Sequence[str],
    mask: str,
    var: str,
    scope: str | None,
    out: list[str],
    indent: str,
) -> str:
    """:func:`gather` at ``coords`` of ``node``'s own shape: the output's
    element in ``scope``, or (``scope`` None) the element an index read of
    the group reads its index at, ``node`` being its index's producer (Note
    [Index producers] in ``conveyor_triton.index_reads``)."""
    read = index_read(node)
    size = read.source.meta["val"].shape[read.dim]
    index_val = read.index.meta["val"]
    i, ok = w.fresh("g"), w.fresh("ok")
    index_coords = [coords[j] for j in read.index_dims]
    if read.index in w.group.at_index:  # its producer, recomputed at the index's coordinates
        producer = read.index
        if producer.target is torch.ops.aten.expand.default:  # a broadcast: the coordinates its source has
            producer = cast(torch.fx.Node, producer.args[0])
            shape = tuple(producer.meta["val"].shape)
            pad = len(index_coords) - len(shape)
            index_coords = ["0" if shape[j] == 1 else index_coords[j + pad] for j in range(len(shape))]
        loaded = gather_at(w, producer, index_coords, mask, var, None, out, indent)
    elif scope is not None and tuple(index_val.shape) == tuple(node.meta["val"].shape):  # gather: at its own index
        loaded = w.load(read.index, w.group.evaluate_at.get(node, tuple(index_val.shape)), scope, out, indent)
    else:
        prefix, addr = own_address(w, read.index, index_coords, var)
        loaded = f"tl.load({prefix} + {addr}, mask={mask}, other=0)"
    out.append(f"{indent}{i} = {loaded}.to(tl.int64)" if w.index64 and index_val.dtype is not torch.int64 else f"{indent}{i} = {loaded}")
    if read.wraps:
        out.append(f"{indent}{i} = tl.where({i} < 0, {i} + {size}, {i})")
    out.append(f"{indent}{ok} = ({i} >= 0) & ({i} < {size})")
    out.append(f'{indent}tl.device_assert({ok} | ({mask} == 0), "index out of range")')
    source_coords = [i if d is None else coords[d] for d in read.source_dims]
    prefix, addr = own_address(w, read.source, source_coords, var)
    name = w.fresh("v")
    value = from_stored(f"tl.load({prefix} + {addr}, mask={mask} & {ok}, other=0)", read.source.meta["val"].dtype)
    out.append(f"{indent}{name} = {value}")
    return name


#: writers of the values this module writes: (writer, node, scope, out, indent) -> name
Writer = Callable[["KernelWriter", torch.fx.Node, str, list[str], str], str]
