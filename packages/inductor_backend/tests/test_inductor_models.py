"""Real ``torch.nn`` models through the ``inductor`` backend, trained against
eager: a small transformer stack on both entry points, a module that writes
its buffers, and compiled autograd's whole-backward graphs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import conveyor
import conveyor_compiled_autograd as cca
import pytest
import torch
from conveyor.testing import check
from conveyor_inductor import programs
from torch import nn


def transformer_stack() -> nn.Module:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True, norm_first=True)
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)


def standalone(f: Any) -> Any:
    return conveyor.compile(f, backend="inductor")


def behind_dynamo(f: Any) -> Any:
    return torch.compile(f, backend="conveyor", options={"backend": "inductor"})


@pytest.mark.parametrize(
    "entry",
    [pytest.param(standalone, marks=pytest.mark.slow), pytest.param(behind_dynamo, marks=pytest.mark.slow)],
    ids=["conveyor.compile", "torch.compile"],
)
def test_transformer_stack_trains_as_eager(entry: Callable[..., Any]) -> None:
    checked = check(transformer_stack(), torch.randn(3, 5, 16), compile=entry, atol=1e-5, rtol=1e-4)
    assert [p.label for p in programs(checked.compiled)] == ["forward", "backward"]


class RunningMean(nn.Module):
    """Writes a buffer in forward (functionalize replays it after Inductor's graph)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(6, 6)
        self.register_buffer("running", torch.zeros(6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        self.running.mul_(0.9).add_(y.detach().mean(0), alpha=0.1)
        return y * self.running


def test_buffer_writes_are_replayed_around_inductors_graph() -> None:
    torch.manual_seed(0)
    check(RunningMean(), torch.randn(4, 6), compile=standalone)


@pytest.mark.slow
def test_compiled_autograd_backward_through_inductor() -> None:
    model, x = transformer_stack(), torch.randn(3, 5, 16)
    reference = transformer_stack()
    reference(x).square().mean().backward()
    compiled = conveyor.compile(model, backend="inductor")
    with cca.enable(backend="inductor") as session:
        compiled(x).square().mean().backward()
    assert session.captures == 1
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-4)
