"""``cat`` inside a fused kernel (Note [Cat in a group]), written into a
:class:`~conveyor_triton.codegen.KernelWriter`."""

from __future__ import annotations

from typing import TYPE_CHECKING
from typing import cast as typed

import torch
import torch.fx

from conveyor_triton.codegen_address import expanded, scope_coordinates
from conveyor_triton.dtypes import compute_dtype, from_stored, tl_type
from conveyor_triton.kernel_source import TensorArg
from conveyor_triton.ops import Value

if TYPE_CHECKING:
    from conveyor_triton.codegen import KernelWriter


def cat(w: KernelWriter, node: torch.fx.Node, scope: str, out: list[str], indent: str) -> str:
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
    at, index, mask, var, coordinate = scope_coordinates(w, node, scope, out, indent)
    d_at = d + len(at) - rank
    permute = w.perm(scope)

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
        if w.launch is not None:
            own = (tuple(a_val.shape), tuple(a_val.stride()))
            arg = TensorArg(a, at, permute, a_val.dtype, own)
            prefix = w.load_arg(arg)
            off = w.address(prefix, arg, index, scope, out, indent)
            shift = lo * expanded(own[0], own[1], at)[d_at]
            addr = f"{prefix} + {off}" + (f" - {shift}" if shift else "")
        else:
            arg = TensorArg(a, tuple(a_val.shape), None, a_val.dtype)
            prefix = w.load_arg(arg)
            terms, step = [], 1
            pad = len(at) - rank
            for j in range(len(at) - 1, pad - 1, -1):
                size = a_val.shape[j - pad]
                if size != 1:
                    cj = coordinate(j) if j != d_at else f"({c} - {lo})"
                    terms.append(cj if step == 1 else f"{cj} * {step}")
                step *= size
            li = w.fresh("i")
            out.append(f"{indent}{li} = {' + '.join(terms) or f'{var} * 0'}")
            addr = f"{prefix} + {w.offset(prefix, arg.rank, li, out, indent)}"
        name = w.fresh("l")
        loaded = from_stored(f"tl.load({addr}, mask={' & '.join(conds)}, other=0)", a_val.dtype)
        out.append(f"{indent}{name} = {Value(loaded, a_val.dtype).to(compute_dtype(val.dtype))}")
        result = name if result is None else f"tl.where({c} < {hi}, {name}, {result})"
    if result is None:  # every input empty: the output is too, no element is read
        result = f"tl.zeros({w.block(scope)}, {tl_type(compute_dtype(val.dtype))})"
    name = w.fresh("v")
    out.append(f"{indent}{name} = {result}")
    return name
