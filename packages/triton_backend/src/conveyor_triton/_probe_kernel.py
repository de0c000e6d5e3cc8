"""The kernel ``conveyor_triton.interpreter`` runs once to check the interpreter."""

import triton
import triton.language as tl


@triton.jit
def loop_over_runtime_bound(out, n, BLOCK: tl.constexpr):
    for i in range(0, n, BLOCK):
        tl.store(out + i, i)
