"""bool and integer semantics: every lowered op must compute what eager does
for bool, int8, uint8, int16, int32 and int64, at the edges of each type.

Eager's rules that a one-to-one Triton expression gets wrong: bool arithmetic
saturates (``True + True`` is ``True``, not 1 + 1 truncated to one bit);
``sum`` of bools and narrow integers is int64; narrow integer results wrap
in their own type before the next op reads them; an integer scalar is
wrapped into the tensor's type for arithmetic and comparisons (``u8 < -1``
compares with 255) but checked by ``fill`` / ``clamp`` / ``where``, which
raise on overflow; bool subtraction, integer division by zero and integers
to negative powers raise. Each program below runs through the triton backend
alone (outputs poisoned) and is compared with eager by ``conveyor.testing.check``,
which also requires an error where eager raises one.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import conveyor_triton
import pytest
import torch
from conveyor.testing import check

DTYPES = [torch.bool, torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64]


def edges(dtype: torch.dtype, n: int = 40, seed: int = 0) -> torch.Tensor:
    """The type's extremes, 0, ±1, and random values in its range."""
    g = torch.Generator(device="cpu").manual_seed(seed)  # drawn on the CPU, moved to the default device
    if dtype is torch.bool:
        return (torch.rand(n, generator=g, device="cpu") > 0.5).to(torch.get_default_device())
    info = torch.iinfo(dtype)
    fixed = [info.min, info.max, 0, 1, info.min + 1, info.max - 1, 2] + ([-1, -2] if info.min < 0 else [])
    lo, hi = max(info.min, -(2**62)), min(info.max, 2**62)
    rand = torch.randint(lo, hi, (n - len(fixed),), generator=g, dtype=torch.int64, device="cpu")
    fixed_values = torch.tensor(fixed, dtype=torch.int64, device="cpu")
    return torch.cat([fixed_values, rand]).to(dtype).to(torch.get_default_device())


PROGRAMS: dict[str, Callable[[torch.Tensor, torch.Tensor], Any]] = {
    "add": lambda a, b: a + b,
    "add_alpha": lambda a, b: torch.add(a, b, alpha=-2) if a.dtype is not torch.bool else torch.add(a, b, alpha=False),
    "add_scalar": lambda a, b: a + (True if a.dtype is torch.bool else 1000),
    "add_then_compare": lambda a, b: (a + b) > 0,  # wraps before the comparison reads it
    "sub": lambda a, b: a - b,  # bool: eager raises
    "sub_then_max": lambda a, b: torch.maximum(a - b, b) if a.dtype is not torch.bool else a,
    "mul": lambda a, b: a * b,
    "mul_then_sum": lambda a, b: (a * b).sum(),
    "neg_abs": lambda a, b: ((-a).abs() < 0) if a.dtype is not torch.bool else ~a,
    "square": lambda a, b: a * a,
    "pow3": lambda a, b: a**3,
    "true_div": lambda a, b: a / 3,
    # raises on a zero divisor (bool: eager raises NotImplementedError, capture's meta RuntimeError)
    "floor_div": lambda a, b: torch.div(a, b, rounding_mode="floor") if a.dtype is not torch.bool else a,
    "trunc_div": lambda a, b: torch.div(a, b.abs() + 1, rounding_mode="trunc") if a.dtype is not torch.bool else a,
    "remainder": lambda a, b: torch.remainder(a, b) if a.dtype is not torch.bool else a,
    "compare_scalars": lambda a, b: torch.stack([a < -1, a == 300, a > 200, a >= 2.5]),
    "compare_mixed": lambda a, b: a.to(torch.int8) < b.to(torch.uint8),
    "add_mixed": lambda a, b: a.to(torch.int8) + b.to(torch.uint8),
    "where": lambda a, b: torch.where(a > b, a, b),
    "where_scalar": lambda a, b: torch.where(a > b, a, 7),
    "where_overflowing_scalar": lambda a, b: torch.where(a > b, a, 300),  # int8 / uint8: eager raises
    "fill_overflowing": lambda a, b: torch.full_like(a, 300),
    "clamp": lambda a, b: a.clamp(-3, 4) if a.dtype is not torch.bool else a,
    "clamp_overflowing": lambda a, b: a.clamp(-300, 300) if a.dtype is not torch.bool else a,
    "maximum_minimum": lambda a, b: torch.stack([torch.maximum(a, b), torch.minimum(a, b)]),
    "amax_amin": lambda a, b: torch.stack([a.amax(), a.amin()]) if a.dtype is not torch.bool else a.any(),
    "sum": lambda a, b: a.sum(),  # int64 for bool and narrow integers
    "sum_in_own_type": lambda a, b: (a + b).reshape(4, 10).sum(1, dtype=a.dtype) > 0,
    "bitwise": lambda a, b: torch.stack([a & b, a | b, a ^ b, ~a]),
    "logical": lambda a, b: torch.stack([torch.logical_and(a, b), torch.logical_xor(a, b), torch.logical_not(a)]),
    "shifts": lambda a, b: torch.stack([a << 3, a >> 2]) if a.dtype is not torch.bool else a,
    "casts": lambda a, b: [
        a.to(d) for d in (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64)
    ],
    "to_float": lambda a, b: [a.float(), a.half(), a.bfloat16(), a.double()],
    "relu_sign": lambda a, b: torch.stack([torch.relu(a), torch.sign(a)]) if a.dtype is not torch.bool else a,
}


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: str(d).removeprefix("torch."))
@pytest.mark.parametrize("program", sorted(PROGRAMS))
def test_integer_and_bool_semantics(program, dtype, triton_only) -> None:
    a, b = edges(dtype, seed=1), edges(dtype, seed=2)
    check(PROGRAMS[program], a, b, compile=triton_only())


def test_bool_add_runs_in_a_kernel_and_saturates(triton_only) -> None:
    # the case from the issue: True + True is True (it was 1 + 1 in one bit: False)
    a = torch.tensor([True, True, False, False])
    b = torch.tensor([True, False, True, False])
    result = check(lambda x, y: x + y, a, b, compile=triton_only())
    assert result.compiled_out.tolist() == [True, True, True, False]
    (report,) = conveyor_triton.reports(result.compiled)
    assert report.kernels and not report.fallbacks, str(report)


def test_bool_sum_is_int64(triton_only) -> None:
    a = torch.ones(300, dtype=torch.bool)
    result = check(lambda x: (x + x).sum(), a, compile=triton_only())
    assert result.compiled_out.dtype is torch.int64 and result.compiled_out.item() == 300


def test_out_of_range_scalars_fall_back_to_aten_which_raises(triton_only) -> None:
    # eager's fill checks the scalar against int8's range and raises; the
    # kernel cannot say so, so the node runs as aten (and raises the same)
    a = torch.zeros(4, dtype=torch.int8)
    result = check(lambda x: torch.full_like(x, 300) + x, a, compile=triton_only())
    assert isinstance(result.compiled_out, RuntimeError)
