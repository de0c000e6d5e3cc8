"""Programs that change a thread- or process-global setting without a context
(grad mode, autocast, the default dtype, deterministic algorithms, float32 matmul
precision): eager leaves the setting changed for the caller on every call, and a
compiled program must too (Note [A program that leaves grad mode changed] in
``conveyor.frontend.modes_kept``). The grad-mode program is PyTorch's
test_aot_grad_mode_mutation (``test/dynamo/test_aot_autograd.py``)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import custom_ops_programs as cp  # noqa: E402


@pytest.mark.parametrize("call", [1, 2])
@pytest.mark.parametrize("entry", ["conveyor", "dynamo"])
def test_grad_mode_set_inside_program(entry: str, call: int) -> None:
    """test_aot_grad_mode_mutation: the program turns grad mode off and returns
    ``(y.clone(), y)``; grad mode stays off after the call and only ``y`` has a history
    (B7, fixed: Note [A program that leaves grad mode changed]), on the first call and later ones."""
    import torch

    def f(x):
        y = x * x
        torch.set_grad_enabled(False)
        return y.clone(), y

    compiled = cp.quiet_compiler(entry)(f)
    try:
        torch.set_grad_enabled(True)
        x = torch.ones(3, requires_grad=True) * 3
        ref = f(x)
        assert not torch.is_grad_enabled()
        for _ in range(call):
            torch.set_grad_enabled(True)
            out = cp.quiet_call(compiled, x)
        assert not torch.is_grad_enabled(), "grad mode was restored by the compiled program"
    finally:
        torch.set_grad_enabled(True)
    torch.testing.assert_close(out, ref)
    assert out[0].grad_fn is None and out[1].grad_fn is not None
    (eg,) = torch.autograd.grad(ref[1].sum(), x)
    (cg,) = torch.autograd.grad(out[1].sum(), x)
    torch.testing.assert_close(cg, eg)


@pytest.mark.parametrize("call", [1, 2])
@pytest.mark.parametrize("entry", ["conveyor"])
def test_autocast_set_inside_program(entry: str, call: int) -> None:
    """As test_grad_mode_set_inside_program, for autocast: the program turns CPU
    autocast on (bfloat16) between two matmuls. Eager's first matmul stays float32,
    its second is bfloat16, and autocast stays on after the call. The capture's trace
    left it on, so the first call cast both matmuls, and later calls left it off
    (Note [A program that leaves grad mode changed]). Behind dynamo (torch 2.13), the
    dtypes are eager's and autocast is off after the call under every backend,
    torch.compile(backend="eager") too: dynamo's own handling, not a stage's."""
    import torch

    def f(x, w):
        y = x @ w
        torch.set_autocast_enabled("cpu", True)
        torch.set_autocast_dtype("cpu", torch.bfloat16)
        return y, x @ w

    compiled = cp.quiet_compiler(entry)(f)
    x, w = torch.randn(4, 4), torch.randn(4, 4)
    dtype = torch.get_autocast_dtype("cpu")
    try:
        ref = f(x, w)
        for _ in range(call):
            torch.set_autocast_enabled("cpu", False)
            torch.set_autocast_dtype("cpu", dtype)
            out = cp.quiet_call(compiled, x, w)
        assert torch.is_autocast_enabled("cpu"), "autocast was restored by the compiled program"
    finally:
        torch.set_autocast_enabled("cpu", False)
        torch.set_autocast_dtype("cpu", dtype)
    assert [o.dtype for o in out] == [o.dtype for o in ref] == [torch.float32, torch.bfloat16]
    torch.testing.assert_close(out, ref)


@pytest.mark.parametrize("call", [1, 2])
@pytest.mark.parametrize("entry", ["conveyor", "dynamo"])
def test_default_dtype_set_inside_program(entry: str, call: int) -> None:
    """The program sets the default dtype to float64 between two factory calls: eager's
    first ``torch.ones`` is float32, its second float64, and float64 stays the default.
    The first compiled call made both float64, later ones neither (Note [A program that
    leaves grad mode changed]). Behind dynamo, the graph holds the call, which dynamo ran as
    it traced: the compiled graph left float32 the default (Note [Global settings set behind
    dynamo])."""
    import torch

    def f(x):
        a = torch.ones(2) + x
        torch.set_default_dtype(torch.float64)
        return a, torch.ones(2) * 2

    compiled = cp.quiet_compiler(entry)(f)
    try:
        ref = f(torch.zeros(2))
        for _ in range(call):
            torch.set_default_dtype(torch.float32)
            out = cp.quiet_call(compiled, torch.zeros(2))
        assert torch.get_default_dtype() is torch.float64
    finally:
        torch.set_default_dtype(torch.float32)
    assert [o.dtype for o in out] == [o.dtype for o in ref] == [torch.float32, torch.float64]


@pytest.mark.parametrize("entry", ["conveyor", "dynamo"])
@pytest.mark.parametrize("setting", ["deterministic", "matmul_precision"])
def test_global_settings_set_inside_program(setting: str, entry: str) -> None:
    """A program that switches deterministic algorithms on, or sets the float32 matmul
    precision, leaves the setting changed for its caller in eager, on every call; the
    compiled program's later calls left it as it was (Note [A program that leaves grad
    mode changed]); behind dynamo, deterministic algorithms alike (Note [Global settings set
    behind dynamo]: PyTorch's test_deterministic_algorithms_mutated)."""
    import torch

    get, put, new = {
        "deterministic": (torch.are_deterministic_algorithms_enabled, torch.use_deterministic_algorithms, True),
        "matmul_precision": (torch.get_float32_matmul_precision, torch.set_float32_matmul_precision, "medium"),
    }[setting]

    def f(x):
        put(new)
        return x + 1

    compiled = cp.quiet_compiler(entry)(f)
    old = get()
    try:
        for _ in range(3):
            put(old)
            torch.testing.assert_close(cp.quiet_call(compiled, torch.zeros(2)), torch.ones(2))
            assert get() == new, f"the compiled program left {setting} at {get()}"
    finally:
        put(old)
