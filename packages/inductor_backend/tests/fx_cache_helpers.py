"""Helpers of the FX-graph-cache tests (``test_inductor_fx_cache``,
``test_inductor_loaded_programs``; their fixture is in ``conftest``)."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch._dynamo.utils import counters


def lookups() -> dict[str, int]:
    """Inductor's FX graph cache decisions since the last call."""
    seen = {k: counters["inductor"][f"fxgraph_cache_{k}"] for k in ("hit", "miss", "bypass")}
    counters.clear()
    return seen


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32), torch.nn.Linear(32, 8))


def step(compiled: Callable[..., torch.Tensor], model: torch.nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    """The loss and every gradient of one training step."""
    model.zero_grad()
    loss = compiled(x).square().mean()
    loss.backward()
    return [loss.detach(), *(p.grad.clone() for p in model.parameters() if p.grad is not None)]
