"""How torch dtypes and Python scalars are written in generated Triton source.

Note [Compute dtype]: float16 and bfloat16 values are loaded, computed on and
kept in float32 inside a kernel and rounded only when stored, as PyTorch's own
Triton code generation does (and as eager computes each op in float32 before
rounding its result). An explicit conversion to a 16-bit float rounds on the
spot, so a program that asks for the rounding gets it.

Note [bfloat16 rounding in the interpreter]: every rounding to a 16-bit
float is written by :func:`to_stored`. On a GPU, ``x.to(tl.bfloat16)`` rounds
to nearest even, as eager does; Triton's interpreter truncates instead (its
``fp_downcast_rounding="rtne"`` rounds halves up), so about half of all
values came out one bfloat16 ulp off eager's. When interpreting, the
rounding to nearest even is written out on the float32 bits (NaN kept as
it is), and bfloat16 values move to and from float32 by their bits (the
interpreter's conversions also get subnormals wrong).
"""

from __future__ import annotations

import math
from typing import Any

import torch

from conveyor_triton.interpreter import interpreting

_TL = {
    torch.float16: "tl.float16",
    torch.bfloat16: "tl.bfloat16",
    torch.float32: "tl.float32",
    torch.float64: "tl.float64",
    torch.int8: "tl.int8",
    torch.int16: "tl.int16",
    torch.int32: "tl.int32",
    torch.int64: "tl.int64",
    torch.uint8: "tl.uint8",
    torch.bool: "tl.int1",
}

SUPPORTED = frozenset(_TL)


def tl_type(dtype: torch.dtype) -> str:
    """The Triton type a tensor of ``dtype`` is stored as."""
    return _TL[dtype]


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype a value of ``dtype`` is held in inside a kernel (Note [Compute dtype])."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype


def cast(expr: str, src: torch.dtype, dst: torch.dtype) -> str:
    """Convert a value held for ``src`` into one held for ``dst``, as
    ``tensor.to(dst)`` would (16-bit targets round; bool is ``!= 0``)."""
    if dst is torch.bool:
        return expr if src is torch.bool else f"({expr} != 0)"
    if dst in (torch.float16, torch.bfloat16):
        held = expr if compute_dtype(src) is torch.float32 else f"{expr}.to(tl.float32)"
        if src is dst:
            return held
        if dst is torch.bfloat16 and interpreting():
            return _round_bf16(held)
        return f"{held}.to({tl_type(dst)}).to(tl.float32)"
    if compute_dtype(src) is dst:
        return expr
    return f"{expr}.to({tl_type(dst)})"


# Note [Explicit roundings and FMA]: on a GPU an explicit rounding is written
# ``x.to(tl.bfloat16).to(tl.float32)``, and LLVM's NVPTX backend contracts a
# multiply whose rounded result feeds an add into one ``fma.rn.bf16`` (seen on
# an H100 with Triton 3.6, and in the PTX Triton 3.9 writes for sm_90): the
# rounding the program asked for is skipped, and ``(y * 3).to(bfloat16) + h``
# came out up to 4 bfloat16 ulps off eager on a quarter of the elements. A
# kernel that rounds explicitly is therefore compiled without floating-point
# contraction (Triton's ``enable_fp_fusion=False``), which the launch passes
# (``conveyor_triton.launch``).
_ROUND_TRIPS = (".to(tl.float16).to(tl.float32)", ".to(tl.bfloat16).to(tl.float32)")


def rounds_explicitly(source: str) -> bool:
    """Whether kernel ``source`` rounds a value to a 16-bit float and computes
    on with it (Note [Explicit roundings and FMA])."""
    return any(trip in source for trip in _ROUND_TRIPS)


def _round_bf16(expr: str) -> str:
    """A float32 value rounded to the nearest even bfloat16, still as float32
    (Note [bfloat16 rounding in the interpreter])."""
    bits = f"({expr}).to(tl.int32, bitcast=True)"
    rounded = f"(({bits} + (0x7FFF + (({bits} >> 16) & 1))) & -65536).to(tl.float32, bitcast=True)"
    return f"tl.where(({expr}) != ({expr}), ({expr}), {rounded})"


def from_stored(expr: str, dtype: torch.dtype) -> str:
    """A loaded value of ``dtype`` as it is held in a kernel (:func:`compute_dtype`);
    bfloat16 moved to float32 by its bits in the interpreter (Note [bfloat16
    rounding in the interpreter]: its conversion gets subnormals wrong)."""
    if compute_dtype(dtype) is dtype:
        return expr
    if dtype is torch.bfloat16 and interpreting():
        return f"({expr}.to(tl.int16, bitcast=True).to(tl.int32) << 16).to(tl.float32, bitcast=True)"
    return f"{expr}.to(tl.float32)"


def to_stored(expr: str, dtype: torch.dtype) -> str:
    """A value held for ``dtype`` (:func:`compute_dtype`) as the type a
    tensor of ``dtype`` is stored as, 16-bit floats rounded to nearest even
    (Note [bfloat16 rounding in the interpreter])."""
    if dtype is torch.bfloat16 and interpreting():
        top = f"({_round_bf16(expr)}.to(tl.int32, bitcast=True) >> 16)"
        return f"{top}.to(tl.int16).to(tl.bfloat16, bitcast=True)"
    return f"{expr}.to({tl_type(dtype)})"


def literal(value: Any) -> str:
    """A Python scalar as Triton source."""
    if isinstance(value, bool):
        return "True" if value else "False"
    if isinstance(value, int):
        return repr(value)
    if isinstance(value, float):
        if math.isnan(value):
            return 'float("nan")'
        if math.isinf(value):
            return 'float("inf")' if value > 0 else 'float("-inf")'
        return repr(value)
    raise TypeError(f"no Triton literal for {type(value).__name__} {value!r}")


def wrap(value: int, dtype: torch.dtype) -> int:
    """An integer scalar as eager converts it for arithmetic on an integer
    ``dtype``: wrapped into the dtype's range by two's complement (``u8 < -1``
    compares with 255, ``i8 + 300`` adds 44), so a literal in generated source
    is always representable in the tensor's type."""
    info = torch.iinfo(dtype)
    span = info.max - info.min + 1
    return (int(value) - info.min) % span + info.min


def fits(value: Any, dtype: torch.dtype) -> bool:
    """Whether eager converts scalar ``value`` to ``dtype`` without its overflow
    check raising (``fill``, ``clamp``, ``where``, ``full`` check; arithmetic
    and comparisons wrap, see :func:`wrap`). Conservative: a value this says
    no to runs as an aten call, which raises or not as eager does."""
    if dtype.is_floating_point:  # eager checks finite values against the type's range
        return not math.isfinite(value) or abs(value) <= torch.finfo(dtype).max
    if dtype is torch.bool:
        return value in (0, 1)
    if isinstance(value, float) and not math.isfinite(value):
        return False
    info = torch.iinfo(dtype)
    return info.min <= value <= info.max


def is_scalar(value: Any) -> bool:
    return isinstance(value, (bool, int, float))
