"""Random ops through the inductor backend (Note [Random ops in the inductor
backend]): Inductor's lowering needs its replace-random pass, which
``torch.compile`` runs before ``compile_fx_inner``; before, any ``torch.rand``,
``rand_like`` or dropout failed the stage (h_sweep4 B10)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import conveyor
import pytest
import torch

ENTRIES: dict[str, Callable[..., Any]] = {
    "conveyor": lambda f, **kw: conveyor.compile(f, backend="inductor", **kw),
    "dynamo": lambda f, **kw: torch.compile(f, backend="conveyor", options={"backend": "inductor", **kw}),
}


@pytest.fixture(autouse=True)
def _fresh() -> None:
    torch._dynamo.reset()


def _noisy(x: torch.Tensor) -> torch.Tensor:
    return x * torch.rand(64) + torch.rand_like(x)


@pytest.mark.parametrize("entry", ENTRIES)
def test_random_ops_compile_with_inductors_own_numbers(entry: str) -> None:
    compiled = ENTRIES[entry](_noisy)
    x = torch.ones(64)
    first, second = compiled(x), compiled(x)
    assert not torch.equal(first, second)  # a fresh draw per call
    assert bool(((first >= 0) & (first < 2)).all())  # x * U[0, 1) + U[0, 1), x = 1


@pytest.mark.parametrize("entry", ENTRIES)
def test_fallback_random_draws_eagers_numbers(entry: str) -> None:
    stages = {"stages": {"inductor": {"config": {"fallback_random": True}}}}
    compiled = ENTRIES[entry](_noisy, **stages)
    x = torch.randn(64)
    torch.manual_seed(0)
    expected = _noisy(x)
    torch.manual_seed(0)
    torch.testing.assert_close(compiled(x), expected)


def test_dropout_in_training_keeps_its_mask_for_the_backward() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.dropout(x * 3, 0.5, training=True)

    x = torch.randn(256, requires_grad=True)
    out = conveyor.compile(f, backend="inductor")(x)
    out.sum().backward()
    kept = out != 0
    assert 0 < int(kept.sum()) < 256
    torch.testing.assert_close(x.grad, kept.float() * 6)  # 3 / (1 - 0.5) where kept, 0 elsewhere


@pytest.mark.parametrize("entry", ENTRIES)
def test_fallback_random_keeps_eagers_draws_through_decompositions(entry: str) -> None:
    """Note [Random ops in the inductor backend]: the decompositions were chosen
    without the stage's options, so ``exponential`` (of gumbel_softmax) was spelled
    with ``rand`` and a formula: other numbers than eager's (test_cpu_repro.py)."""
    stages = {"stages": {"inductor": {"config": {"fallback_random": True}}}}

    def gumbels(x: torch.Tensor) -> torch.Tensor:
        return x - torch.empty_like(x).exponential_().log()

    compiled = ENTRIES[entry](gumbels, **stages)
    x = torch.randn(64)
    torch.manual_seed(0)
    expected = gumbels(x)
    torch.manual_seed(0)
    torch.testing.assert_close(compiled(x), expected)

