"""Note [Writes through a dtype view]: a write through a view of another
dtype, under grad, runs eagerly with a warning; gradients match eager's."""

from __future__ import annotations

import warnings

import conveyor
import pytest
import torch
from conveyor.testing import check


def int_view_write(x, y):
    x.view(torch.int64).add_(1)
    return (x * y,)


def complex_as_float_write(x):
    x.view(torch.float64).add_(1)
    return (x * 1,)


@pytest.mark.parametrize(
    ("program", "make"),
    [
        (int_view_write, lambda: [torch.randn(3, dtype=torch.float64, requires_grad=True) * 1, torch.randn(3)]),
        (complex_as_float_write, lambda: [torch.randn(4, 3, dtype=torch.complex128, requires_grad=True) * 1]),
    ],
    ids=["int64_view", "complex_as_float64"],
)
def test_a_write_through_a_dtype_view_under_grad_runs_eagerly(program, make) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check(program, *make(), compile=conveyor.compile)
    assert any("Writes through a dtype view" in str(w.message) for w in caught)


def test_without_grad_it_compiles() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        check(int_view_write, torch.randn(3, dtype=torch.float64), torch.randn(3), compile=conveyor.compile)
