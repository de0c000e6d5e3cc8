"""Note [Complex scatters under grad]: writes through a slice or a select of a
complex tensor that requires grad compile and differentiate as eager does
(h_fuzz2's B11: the autograd stage raised "select_scatter does not support
automatic differentiation for outputs with complex dtype")."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import conveyor
import pytest
import torch
from conveyor.testing import check

C = torch.complex128


def slice_write(x):
    x[1:2].mul_(3)
    return x * 1


def select_write(x):
    x[:, 1].mul_(2j)
    return x * 1


def select_last_write(x):
    x.select(-1, -1).add_(1 - 1j)
    return x.abs()


def column_zero(x, w):
    y = x * w
    y[:, 0].zero_()
    return y


def strided_slice_write(x):
    x.t()[1:3:2].mul_(1j)
    return x * 1


def _leaf(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, dtype=C, generator=torch.Generator().manual_seed(sum(shape))).requires_grad_()


CASES: list[tuple[Callable[..., Any], Callable[[], list[torch.Tensor]]]] = [
    (slice_write, lambda: [_leaf(3, 4) * 1]),
    (select_write, lambda: [_leaf(3, 4) * 1]),
    (select_last_write, lambda: [_leaf(3, 4) * 1]),
    (column_zero, lambda: [_leaf(3, 4), _leaf(3, 4)]),
    (strided_slice_write, lambda: [_leaf(3, 4) * 1]),
]
DEFAULT = {"slice_write", "column_zero"}


def _dynamo(f: Any) -> Any:
    torch._dynamo.reset()
    return torch.compile(f, backend="conveyor")


def _params() -> list[Any]:
    params = []
    for program, make in CASES:
        for entry, compile in (("conveyor", conveyor.compile), ("dynamo", _dynamo)):
            marks = [] if program.__name__ in DEFAULT and entry == "conveyor" else [pytest.mark.slow]
            params.append(pytest.param(program, make, compile, marks=marks, id=f"{program.__name__}-{entry}"))
    return params


@pytest.mark.parametrize(("program", "make", "compile"), _params())
def test_complex_view_writes_under_grad(program: Any, make: Any, compile: Any) -> None:
    check(program, *make(), compile=compile)


def test_without_grad_the_scatter_stays() -> None:
    """Only a program that needs gradients is spelled on the real views."""
    compiled = conveyor.compile(slice_write)
    check(slice_write, torch.randn(3, 4, dtype=C), compile=lambda f: compiled)
    graph = next(g.graph for g in conveyor.last_graphs(compiled) if g.stage == "functionalize")
    targets = {n.target for n in graph.graph.nodes}
    assert torch.ops.aten.slice_scatter.default in targets
    assert torch.ops.aten.view_as_real.default not in targets
