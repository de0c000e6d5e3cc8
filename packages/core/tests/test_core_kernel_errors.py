"""An error that one of torch's Python kernels raises during capture makes
the program run eagerly (Note [Errors of torch's Python kernels]): eager's
kernel decides, with its result or its own error type."""

from __future__ import annotations

import conveyor
import pytest
import torch

FALLBACK = "conveyor: running .* eagerly: capture on fake tensors raised RuntimeError"


@pytest.mark.parametrize("fn", [lambda x: x << 1, lambda x: x >> 1, lambda x: (x << 2) + 1], ids=["lshift", "rshift", "lshift_add"])
def test_bool_shift_runs_as_in_eager(fn) -> None:
    b = torch.tensor([True, False, True])
    with pytest.warns(UserWarning, match=FALLBACK):
        out = conveyor.compile(fn)(b)
    torch.testing.assert_close(out, fn(b))


@pytest.mark.parametrize("fn", [lambda x: x // x, lambda x: torch.floor_divide(x, True)], ids=["floordiv", "floor_divide"])
def test_bool_floor_divide_raises_eagers_error(fn) -> None:
    b = torch.tensor([True, False, True])
    with pytest.raises(NotImplementedError) as eager_exc:
        fn(b)
    with pytest.warns(UserWarning, match=FALLBACK), pytest.raises(NotImplementedError) as compiled_exc:
        conveyor.compile(fn)(b)
    assert str(compiled_exc.value) == str(eager_exc.value)


def test_an_error_of_the_program_itself_is_raised_as_is() -> None:
    def fn(x):
        raise ValueError("the program's own error")

    with pytest.raises(ValueError, match="the program's own error"):
        conveyor.compile(fn)(torch.ones(2))


def test_a_shape_error_keeps_eagers_type() -> None:
    def fn(a, b):
        return a @ b

    a, b = torch.randn(2, 3), torch.randn(2, 3)
    with pytest.raises(RuntimeError) as eager_exc:
        fn(a, b)
    with pytest.raises(RuntimeError) as compiled_exc:
        conveyor.compile(fn)(a, b)
    assert type(compiled_exc.value) is type(eager_exc.value)
