"""A program that calls a function ``torch.compile`` optimized, or a
higher-order op that optimizes itself (``torch.cond``, ``map``), compiles
through dynamo, and leaves dynamo able to compile those functions afterwards
(Note [Compiled functions inside a capture])."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import conveyor
import pytest
import torch
from conveyor.testing import check
from torch._dynamo.testing import CompileCounter

THROUGH_DYNAMO = r"compiling .* through dynamo.*torch\.compile optimized"


def _cond_program(x: torch.Tensor) -> torch.Tensor:
    return torch.cond(x.sum() > 0, lambda s: (s.sin(),), lambda s: (s.cos() * 3,), (x * 2,))[0]  # type: ignore[no-any-return]


def _map_program(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    from torch._higher_order_ops.map import map as hop_map

    return hop_map(lambda a, b: a * b + 1, x, y)  # type: ignore[no-any-return]


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize(
    "fn,make",
    [
        (_cond_program, lambda: [torch.randn(3)]),
        (_map_program, lambda: [torch.randn(4, 3), torch.randn(3)]),
    ],
    ids=["cond", "map"],
)
def test_a_higher_order_op_called_outside_dynamo_compiles_through_dynamo(
    fn: Callable[..., Any], make: Callable[[], list[torch.Tensor]], grad: bool
) -> None:
    args = make()
    if grad:
        args[0].requires_grad_()
    with pytest.warns(UserWarning, match=THROUGH_DYNAMO):
        check(fn, *args)
    # eager's own torch.cond still runs: the capture left no skip mark on its code
    expected = fn(*args)
    torch.testing.assert_close(fn(*args), expected)
    if grad:
        torch.autograd.grad(fn(*args).sum(), args[0])


def test_a_cond_under_conveyor_compile_then_eager_with_a_gradient() -> None:
    """Before: the capture ran ``torch.cond``'s eager path under its dispatch
    modes, dynamo marked cond's wrapper code skipped for the process, and
    the next eager ``torch.cond`` with a gradient raised inside dynamo."""
    x = torch.randn(3)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        conveyor.compile(_cond_program)(x)
    y = x.clone().requires_grad_()
    (g,) = torch.autograd.grad(_cond_program(y).sum(), y)
    expected = 2 * torch.cos(2 * x) if x.sum() > 0 else -6 * torch.sin(2 * x)
    torch.testing.assert_close(g, expected)


def test_a_torch_compiled_function_inside_a_program() -> None:
    counter = CompileCounter()

    @torch.compile(backend=counter)
    def inner(x: torch.Tensor) -> torch.Tensor:
        return x.sin() + 1

    def program(x: torch.Tensor) -> torch.Tensor:
        return inner(x) * 2

    x = torch.randn(3, requires_grad=True)
    with pytest.warns(UserWarning, match=THROUGH_DYNAMO):
        check(program, x)
    before = counter.frame_count
    torch._dynamo.reset()
    inner(torch.randn(3))
    assert counter.frame_count == before + 1  # the inner function still compiles on its own


def test_the_watch_knows_torch_compile_wrapper_by_name_and_file() -> None:
    """The probe of Note [Compiled functions inside a capture]: the wrapper's
    code is where the watch looks for it on this torch."""
    import types

    from conveyor.frontend import call_watch
    from torch._dynamo.eval_frame import _TorchDynamoContext

    found = [c for c in _TorchDynamoContext.__call__.__code__.co_consts if isinstance(c, types.CodeType)]
    assert any(c.co_name == "compile_wrapper" and c.co_filename == call_watch._EVAL_FRAME_FILE for c in found)


def test_importing_conveyor_imports_neither_dynamo_nor_triton() -> None:
    """triton reads TRITON_INTERPRET at its first import: importing conveyor
    must leave that to the program (the triton backend's tests set it)."""
    import subprocess
    import sys

    code = "import sys, conveyor; print(sorted(m for m in ('torch._dynamo', 'triton') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_capture_is_a_compile_to_library_code() -> None:
    """Note [A capture is a compile]: a cache that bypasses itself under a
    compile (transformers' ``compile_compatible_method_lru_cache``: BEiT's
    relative-position index) kept the capture's FakeTensor, and every later
    eager call of the library read it."""
    import functools

    @functools.lru_cache(maxsize=4)
    def _cached(n: int) -> torch.Tensor:
        return torch.arange(n) * 2

    def index(n: int) -> torch.Tensor:
        return _cached.__wrapped__(n) if torch.compiler.is_compiling() else _cached(n)

    def program(x: torch.Tensor) -> torch.Tensor:
        return x + index(x.shape[0])

    x = torch.randn(5)
    torch.testing.assert_close(conveyor.compile(program)(x), x + torch.arange(5) * 2)
    assert not torch.compiler.is_compiling()
    assert _cached.cache_info().currsize == 0  # nothing cached during the capture
    assert type(index(5)) is torch.Tensor  # eager's own call caches a real tensor
