"""Note [Backwards that raise]: a program whose backward torch's autograd
cannot trace (no derivative, a gradient of the wrong shape) runs eagerly,
with a warning: eager's forward, and eager's error only when a backward
runs, on both entry points."""

from __future__ import annotations

from typing import Any

import conveyor
import pytest
import torch
from conveyor.testing import check


def _floor_divide(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a // b  # floor_divide has no derivative: eager raises in backward only


def _scatter_reduce(x: torch.Tensor, i: torch.Tensor) -> torch.Tensor:
    return x.scatter(1, i, 1.0, reduce="add") * 2


def _dynamo(fn: Any) -> Any:
    torch._dynamo.reset()
    return torch.compile(fn, backend="conveyor")


@pytest.mark.parametrize("compile", [conveyor.compile, _dynamo], ids=["conveyor", "dynamo"])
def test_a_program_without_a_derivative_runs_its_forward_and_raises_in_backward(compile: Any) -> None:
    a, b = torch.randn(4, requires_grad=True), torch.rand(4) + 1
    with pytest.warns(UserWarning, match="Backwards that raise"):
        out = compile(_floor_divide)(a, b)
    assert torch.equal(out, _floor_divide(a, b)) and out.requires_grad
    with pytest.raises(RuntimeError, match="floor_divide"):
        out.sum().backward()


@pytest.mark.parametrize("compile", [conveyor.compile, _dynamo], ids=["conveyor", "dynamo"])
def test_the_checker_sees_eagers_behaviour(compile: Any) -> None:
    x, i = torch.randn(4, 3, requires_grad=True), torch.tensor([[0, 1], [2, 0], [1, 1], [0, 2]])
    with pytest.warns(UserWarning, match="Backwards that raise"):
        check(_scatter_reduce, x, i, compile=compile)
