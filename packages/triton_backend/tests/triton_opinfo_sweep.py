"""The OpInfo sweep shared by the test and by a run that prints pass counts.

For each op the backend lowers, compile each of (a bounded number of) its
``op_db`` sample inputs with the triton backend alone, outputs poisoned, and
compare with eager through ``conveyor.testing.check``.
"""

from __future__ import annotations

import os

if __name__ == "__main__":
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import conveyor_triton
import torch
from conveyor.testing import check
from conveyor.testing.opinfo import sample_call
from torch.testing._internal.common_methods_invocations import op_db

OPS = (
    "add sub mul div.no_rounding_mode neg abs reciprocal exp exp2 expm1 log log2 log10 log1p sqrt rsqrt "
    "sin cos tanh sigmoid erf nn.functional.relu floor ceil trunc maximum minimum clamp clamp_min clamp_max "
    "where eq ne lt le gt ge logical_not logical_and logical_or logical_xor bitwise_not bitwise_and "
    "bitwise_or bitwise_xor isnan isinf pow square full_like zeros_like ones_like clone "
    "sum mean amax amin softmax log_softmax var var_mean std nn.functional.layer_norm nn.functional.gelu "
    "nn.functional.silu argmax argmin cat cumsum"
).split()

TOLERANCE: dict[torch.dtype, tuple[float | None, float | None]] = {
    torch.float32: (1e-5, 1.3e-5),
    torch.float16: (1e-2, 1e-2),
    torch.bfloat16: (3e-2, 2e-2),
}
# bool and integer inputs: integer and bool outputs compare exactly, float
# outputs (``exp`` of an int) with assert_close's float32 defaults
for _dtype in (torch.bool, torch.uint8, torch.int8, torch.int16, torch.int32, torch.int64):
    TOLERANCE[_dtype] = (None, None)

OPINFOS = {(o.name + ("." + o.variant_test_name if o.variant_test_name else "")): o for o in op_db}


@dataclass(frozen=True)
class Outcome:
    op: str
    dtype: torch.dtype
    passed: int
    lowered: int  # samples in which at least one kernel ran
    failures: tuple[str, ...]


def samples(name: str, dtype: torch.dtype, limit: int) -> Iterator[tuple[Callable[..., Any], list[Any]]]:
    op = OPINFOS[name]
    device = torch.get_default_device().type  # cuda under CONVEYOR_TEST_DEVICE=cuda (real kernels)
    if dtype not in op.supported_dtypes(device):
        return
    for i, s in enumerate(op.sample_inputs(device, dtype, requires_grad=False)):
        if i >= limit:
            return
        yield sample_call(op.op, s)


def run(name: str, dtype: torch.dtype, compile: Callable[[Any], Any], limit: int = 6) -> Outcome:
    passed = lowered = 0
    failures: list[str] = []
    atol, rtol = TOLERANCE[dtype]
    for fn, tensors in samples(name, dtype, limit):
        try:
            result = check(fn, *tensors, compile=compile, atol=atol, rtol=rtol, check_grads=False)
        except Exception as exc:  # collected: the caller decides what is expected
            failures.append(f"{type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
            continue
        passed += 1
        if not isinstance(result.eager_out, Exception) and any(
            r.kernels for r in conveyor_triton.reports(result.compiled)
        ):
            lowered += 1
    return Outcome(name, dtype, passed, lowered, tuple(failures))


if __name__ == "__main__":
    import conveyor
    import conveyor_triton.plugin
    from conveyor import Plugins

    plugins = Plugins()
    plugins.register(conveyor_triton.plugin, name="triton")

    def compile(f: Any) -> Any:
        return conveyor.compile(f, plugins=plugins, backend="triton", stages={"triton": {"poison": True}})

    import sys

    dtypes = [getattr(torch, d) for d in (sys.argv[1:] or ["float32", "float16"])]
    total = passed = 0
    for dtype in dtypes:
        for name in OPS:
            out = run(name, dtype, compile)
            n = out.passed + len(out.failures)
            total, passed = total + n, passed + out.passed
            print(f"{name:28s} {str(dtype):15s} {out.passed}/{n} passed, {out.lowered} with kernels", *out.failures, sep="\n    ")
    print(f"total {passed}/{total}")
