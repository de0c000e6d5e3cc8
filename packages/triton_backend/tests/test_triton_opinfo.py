"""OpInfo sweep: every pointwise and reduction op the backend lowers, on its
``op_db`` sample inputs, compiled with the triton backend (outputs poisoned
before each launch) and compared with eager.

Pass counts (all samples, float32 / float16 / bfloat16, bool and the integer
types) are in the package README. Bounded: a few samples per op and dtype, so
the sweep stays in CI.
"""

from __future__ import annotations

import pytest
import torch
from triton_opinfo_sweep import OPS, run

# op -> why its samples never reach a kernel (they still must match eager, through aten)
FALLS_BACK = {
    "clamp": "op_db samples pass tensor bounds (aten.clamp.Tensor has no lowering)",
    "clamp_min": "op_db samples pass tensor bounds (aten.clamp_min.Tensor has no lowering)",
    "clamp_max": "op_db samples pass tensor bounds (aten.clamp_max.Tensor has no lowering)",
    "pow": "op_db samples use tensor exponents or exponents other than 0, ±0.5, ±1, ±2, 3, 4",
}

# (op, dtype) -> reason, for samples known to differ from eager
XFAIL: dict[tuple[str, torch.dtype], str] = {}

INT_OPS = "add sub mul neg abs eq lt ge maximum minimum where bitwise_not bitwise_and bitwise_or bitwise_xor sum amax amin argmax argmin".split()

# every op in bool and the integer types (the samples in dtypes an op does not support are skipped)
EXACT_DTYPES = (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int64)

# the default (CI) run: bool and int64 stand for the integer types (the narrow ones share their code paths)
CI_EXACT = (torch.bool, torch.int64)

LIMITS = {torch.float32: 6, torch.float16: 3, torch.bfloat16: 2, torch.int32: 3, **{d: 3 for d in EXACT_DTYPES}}

# the default (CI) run: float32 for every op (the reduced-precision floats take one upcast-compute-round
# code path in every kernel, which test_triton_dtypes.py checks per kernel family in CI); --runslow runs
# float16 and bfloat16 too
CI_FLOAT = (torch.float32,)

CASES = (
    [
        pytest.param(
            op,
            dtype,
            id=f"{op}-{str(dtype).removeprefix('torch.')}",
            marks=[
                *([pytest.mark.xfail(reason=XFAIL[(op, dtype)], strict=True)] if (op, dtype) in XFAIL else []),
                *([] if dtype in CI_FLOAT else [pytest.mark.slow]),
            ],
        )
        for dtype in (torch.float32, torch.float16, torch.bfloat16)
        for op in OPS
    ]
    + [pytest.param(op, torch.int32, id=f"{op}-int32", marks=pytest.mark.slow) for op in INT_OPS]
    + [
        pytest.param(
            op,
            dtype,
            id=f"{op}-{str(dtype).removeprefix('torch.')}",
            marks=() if dtype in CI_EXACT else pytest.mark.slow,
        )
        for dtype in EXACT_DTYPES
        for op in OPS
    ]
)


@pytest.mark.opinfo
@pytest.mark.parametrize("op, dtype", CASES)
def test_opinfo_samples_match_eager(op, dtype, triton_only):
    outcome = run(op, dtype, triton_only(), limit=LIMITS[dtype])
    assert not outcome.failures, "\n".join(outcome.failures)
    n = outcome.passed
    if n and op not in FALLS_BACK and dtype is torch.float32:
        assert outcome.lowered > 0, f"{op}: no sample ran a kernel"
