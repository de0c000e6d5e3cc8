"""Note [Storage swaps functionalization cannot replay]: ``set_`` programs the
random-program fuzzer found silently wrong run eagerly, with a warning, and
match eager on both entry points."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import conveyor
import pytest
import torch
from conveyor.testing import check

f64 = torch.float64


def _grad(*shapes: int) -> Callable[[], list[torch.Tensor]]:
    return lambda: [torch.ones(n, dtype=f64, requires_grad=True) * 1 for n in shapes]


def set_onto_aliased_input(a, b):
    b.set_(a)
    return b * 1


def set_onto_itself_then_write(b):
    b.set_(b)
    b.add_(1)
    return b * 1


def write_then_set_onto_itself(b):
    b.add_(1)
    b.set_(b)
    return b * 1


def no_grad_set_then_write(a, b):
    with torch.no_grad():
        a.set_(b)
    a.mul_(2)
    return a + b


def no_grad_set_onto_another_shape(b):
    with torch.no_grad():
        b.set_(torch.zeros(2, dtype=b.dtype))
    return b * 1


def data_assignment_then_write(x, y):
    x.data = y
    x.add_(1.5)
    return x * 1


CASES: list[tuple[Callable[..., Any], Callable[[], list[Any]]]] = [
    (set_onto_aliased_input, lambda: (lambda r: [r[1], r[0, :2]])(torch.arange(6, dtype=f64).reshape(2, 3))),
    (set_onto_itself_then_write, lambda: [torch.arange(4, dtype=f64)]),
    (
        write_then_set_onto_itself,
        lambda: [torch.arange(12, dtype=f64).reshape(4, 3).as_strided((2, 3), (1, 2), 4)],
    ),
    (no_grad_set_then_write, _grad(3, 3)),
    (no_grad_set_onto_another_shape, _grad(3)),
]


@pytest.mark.parametrize(("program", "make"), CASES, ids=[p.__name__ for p, _ in CASES])
def test_swaps_functionalization_cannot_replay_run_eagerly(program: Any, make: Any) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check(program, *make(), compile=conveyor.compile)
    assert any("Storage swaps functionalization cannot replay" in str(w.message) for w in caught)


def test_a_data_assignment_then_a_write_behind_dynamo() -> None:
    """Dynamo turns ``x.data = y`` into a no-grad ``set_``: the write after it
    reaches the storage ``x`` now shares with ``y``."""
    torch._dynamo.reset()
    x, y = torch.zeros(3, requires_grad=True) * 1, torch.ones(3)
    rx, ry = torch.zeros(3, requires_grad=True) * 1, torch.ones(3)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="conveyor: ", category=UserWarning)
        torch.compile(data_assignment_then_write, backend="conveyor")(x, y)
    data_assignment_then_write(rx, ry)
    assert torch.equal(x.detach(), rx.detach()) and torch.equal(y, ry)
