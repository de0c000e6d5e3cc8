"""A whole training step through the shared eager-vs-compiled checker (``conveyor.testing.check``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import conveyor
import conveyor_compiled_autograd as cca
import pytest
import torch
from conveyor.testing import check
from torch import nn


class Step(nn.Module):
    """One step: forward, loss, backward; returns the loss and every ``.grad``."""

    def __init__(self, model: Callable[[nn.Module], Any] | None = None) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.net = nn.Sequential(nn.Linear(6, 16), nn.LayerNorm(16), nn.GELU(), nn.Linear(16, 3))
        self.compile_net = model

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> tuple[torch.Tensor, ...]:
        net = self.compile_net(self.net) if self.compile_net is not None else self.net
        loss = nn.functional.cross_entropy(net(x), target)
        loss.backward()
        return (loss.detach(), *(p.grad for p in self.net.parameters()))


def under_compiled_autograd(forward: str, **options: Any) -> Callable[[Step], Callable[..., Any]]:
    """The compiled side: the backward under compiled autograd, the forward
    eager or compiled by conveyor (then its backward graph is inlined)."""

    def compile(step: Step) -> Callable[..., Any]:
        if forward == "conveyor":
            step.compile_net = conveyor.compile

        def run(*args: Any) -> Any:
            with cca.enable(**options) as session:
                out = step(*args)
            assert session.captures == 1
            assert session.last is not None and session.last.inlined == (1 if forward == "conveyor" else 0)
            return out

        return run

    return compile


@pytest.mark.parametrize("forward", ["eager", "conveyor"])
def test_training_step_matches_eager(forward: str) -> None:
    x = torch.randn(5, 6)
    target = torch.tensor([0, 2, 1, 1, 0])
    check(Step(), x, target, compile=under_compiled_autograd(forward), check_grads=False, atol=1e-5, rtol=1e-4)
