"""The kernel of a scatter (Note [Scatters] in ``conveyor_triton.scatters``):
one program per block of the visited elements, in row-major order; each
loads its indexes and source values and stores or atomically adds them into
the output (the destination's copy). Sizes and strides are constants of the
source (Note [Static layouts] in ``conveyor_triton.codegen``): the step
generates one kernel per set of layouts it meets."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from conveyor_triton.domain import contiguous_strides
from conveyor_triton.dtypes import literal, tl_type, to_stored
from conveyor_triton.kernel_source import kernel_text
from conveyor_triton.launch import Launch, choose
from conveyor_triton.scatters import Scatter

#: a tensor's sizes and strides
Layout = tuple[tuple[int, ...], tuple[int, ...]]

INT32_LIMIT = 2**31 - 1


@dataclass(frozen=True)
class ScatterKernel:
    """A scatter's generated kernel, for the layouts it was generated for.

    Its arguments are the output, the index and (unless the source is a
    scalar, written into the source) the source, then ``XBLOCK``."""

    name: str
    source: str
    launch: Launch
    layouts: tuple[Layout, ...]


def _span(layout: Layout) -> int:
    shape, stride = layout
    return 1 + sum((s - 1) * abs(st) for s, st in zip(shape, stride) if s > 0)


def _address(coords: Sequence[str], strides: Sequence[int]) -> str:
    terms = [c if st == 1 else f"{c} * {st}" for c, st in zip(coords, strides) if c != "0" and st != 0]
    return " + ".join(terms) or "xindex * 0"  # a block of addresses, as the mask is


def generate_scatter(s: Scatter, name: str, layouts: Sequence[Layout], device: torch.device) -> ScatterKernel:
    """The kernel of ``s`` for the output's, the index's and the source's
    (when a tensor) ``layouts``, launched as on ``device``'s type."""
    out_layout, index_layout = layouts[0], layouts[1]
    out_dtype = s.dtype
    numel = math.prod(s.shape)
    launch = choose(device, numel, None)
    index64 = numel > INT32_LIMIT or any(_span(la) > INT32_LIMIT for la in layouts)
    body = ["    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)"]
    if index64:
        body.append("    xindex = xindex.to(tl.int64)")
    body.append(f"    xmask = xindex < {numel}")
    coords: list[str] = []
    for j, size in enumerate(s.shape):
        inner = math.prod(s.shape[j + 1 :])
        if size == 1:
            coords.append("0")
            continue
        expr = "xindex" if inner == 1 else f"(xindex // {inner})"
        if j > 0:
            expr = f"{expr} % {size}"
        body.append(f"    x{j} = {expr}")
        coords.append(f"x{j}")
    index_addr = _address([coords[d] for d in s.index_dims], index_layout[1])
    body.append(f"    i = tl.load(index_ptr + ({index_addr}), mask=xmask, other=0)")
    if index64 or s.index_dtype is not torch.int64:
        body.append("    i = i.to(tl.int64)")
    size = out_layout[0][s.dim]
    if s.wraps:
        body.append(f"    i = tl.where(i < 0, i + {size}, i)")
    body.append(f"    ok = (i >= 0) & (i < {size})")
    body.append('    tl.device_assert(ok | (xmask == 0), "index out of range")')
    if s.skip is not None:  # an embedding's padding_idx: its gradient row stays zero
        body.append(f"    ok = ok & (i != {s.skip})")
    params = ["out_ptr", "index_ptr"]
    if isinstance(s.source, torch.fx.Node):
        params.append("src_ptr")
        src_shape, src_strides = layouts[2]
        pad = len(s.shape) - len(src_shape)
        src_coords = ["0" if src_shape[j] == 1 else coords[j + pad] for j in range(len(src_shape))]
        if src_shape == s.shape and src_strides == tuple(contiguous_strides(s.shape)):
            src_addr = "xindex"  # in the visited order: a load Triton can vectorize
        else:
            src_addr = _address(src_coords, src_strides)
        body.append(f"    v = tl.load(src_ptr + ({src_addr}), mask=xmask)")
    else:
        value = torch.tensor(s.source, dtype=out_dtype).item()
        full = f"tl.full([XBLOCK], {literal(value)}, {tl_type(torch.float32 if out_dtype.is_floating_point else out_dtype)})"
        body.append(f"    v = {to_stored(full, out_dtype) if out_dtype.is_floating_point else full}")
    dest_coords = ["i" if d is None else coords[d] for d in s.dest_dims]
    out_addr = _address(dest_coords, out_layout[1])
    if s.mode == "add":
        body.append(f'    tl.atomic_add(out_ptr + ({out_addr}), v, mask=xmask & ok, sem="relaxed")')
    else:
        body.append(f"    tl.store(out_ptr + ({out_addr}), v, mask=xmask & ok)")
    source = kernel_text(name, [*params, "XBLOCK: tl.constexpr"], body)
    return ScatterKernel(name, source, launch, tuple(layouts))


def generate_generic_scatter(s: Scatter, name: str, index64: bool) -> str:
    """The generic kernel of ``s`` (a symbolically sized graph's per-size
    programs share it): sizes and strides are arguments, after the tensors,
    in the order :func:`generic_args` gives them; no dimension is skipped."""
    rank, dest_rank, source = len(s.shape), len(s.dest_shape), isinstance(s.source, torch.fx.Node)
    params = ["out_ptr", "index_ptr", *(["src_ptr"] if source else []), "xnumel", "dim_size"]
    params += [f"size{j}" for j in range(rank)] + [f"out_stride{j}" for j in range(dest_rank)]
    params += [f"index_stride{j}" for j in range(len(s.index_dims))]
    params += [f"src_stride{j}" for j in range(rank)] if source else []
    body = ["    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)"]
    if index64:
        body.append("    xindex = xindex.to(tl.int64)")
    body += ["    xmask = xindex < xnumel", "    rest = xindex"]
    for j in reversed(range(rank)):
        body += [f"    x{j} = rest % size{j}", f"    rest = rest // size{j}"]

    def address(coords: Sequence[str], prefix: str) -> str:
        return " + ".join(f"{c} * {prefix}{j}" for j, c in enumerate(coords)) or "xindex * 0"

    body.append(
        f"    i = tl.load(index_ptr + ({address([f'x{d}' for d in s.index_dims], 'index_stride')}), mask=xmask, other=0)"
    )
    body.append("    i = i.to(tl.int64)")
    if s.wraps:
        body.append("    i = tl.where(i < 0, i + dim_size, i)")
    body.append("    ok = (i >= 0) & (i < dim_size)")
    body.append('    tl.device_assert(ok | (xmask == 0), "index out of range")')
    if s.skip is not None:
        body.append(f"    ok = ok & (i != {s.skip})")
    if source:
        body.append(f"    v = tl.load(src_ptr + ({address([f'x{j}' for j in range(rank)], 'src_stride')}), mask=xmask)")
    else:
        value = torch.tensor(s.source, dtype=s.dtype).item()
        full = (
            f"tl.full([XBLOCK], {literal(value)}, {tl_type(torch.float32 if s.dtype.is_floating_point else s.dtype)})"
        )
        body.append(f"    v = {to_stored(full, s.dtype) if s.dtype.is_floating_point else full}")
    out_addr = address(["i" if d is None else f"x{d}" for d in s.dest_dims], "out_stride")
    if s.mode == "add":
        body.append(f'    tl.atomic_add(out_ptr + ({out_addr}), v, mask=xmask & ok, sem="relaxed")')
    else:
        body.append(f"    tl.store(out_ptr + ({out_addr}), v, mask=xmask & ok)")
    return kernel_text(name, [*params, "XBLOCK: tl.constexpr"], body)


def generic_args(s: Scatter, tensors: Sequence[torch.Tensor]) -> tuple[list[object], bool]:
    """The arguments of ``s``'s generic kernel for ``tensors`` (output,
    index, source), the source expanded to the visited shape where it
    broadcasts (``index_put``), and whether they need 64-bit indexing."""
    out, index = tensors[0], tensors[1]
    args: list[object] = [out, index]
    strides: list[int] = []
    if len(tensors) > 2:
        src = tensors[2]
        src = src.expand(s.shape) if src.dim() != len(s.shape) or s.wraps else src
        args.append(src)
        strides = list(src.stride())
    numel = math.prod(s.shape)
    args += [numel, s.size, *s.shape, *out.stride(), *index.stride(), *strides]
    layouts = [_layout_of(t) for t in args if isinstance(t, torch.Tensor)]
    return args, numel > INT32_LIMIT or any(_span(la) > INT32_LIMIT for la in layouts)


def _layout_of(t: torch.Tensor) -> Layout:
    return (tuple(t.shape), tuple(t.stride()))
