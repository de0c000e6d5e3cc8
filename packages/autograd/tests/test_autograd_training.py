"""Real ``torch.nn`` models train for 20 steps under ``conveyor.compile``
with losses, parameters and buffers matching eager (dropout disabled)."""

from __future__ import annotations

import copy
import importlib.util
from collections.abc import Callable

import pytest
import torch
from autograd_helpers import labels, pipeline

STEPS = 20


class SmallCNN(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv1 = torch.nn.Conv2d(3, 8, 3, padding=1)
        self.bn1 = torch.nn.BatchNorm2d(8)
        self.conv2 = torch.nn.Conv2d(8, 8, 3, stride=2)
        self.bn2 = torch.nn.BatchNorm2d(8)
        self.head = torch.nn.Linear(8, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.relu(self.bn1(self.conv1(x)))
        x = torch.relu(self.bn2(self.conv2(x)))
        return self.head(x.mean((2, 3)))


def transformer() -> torch.nn.Module:
    return torch.nn.TransformerEncoderLayer(16, 4, 32, dropout=0.0, batch_first=True)


def mlp() -> torch.nn.Module:
    return torch.nn.Sequential(
        torch.nn.Linear(12, 32), torch.nn.GELU(), torch.nn.LayerNorm(32), torch.nn.Linear(32, 32), torch.nn.Tanh(), torch.nn.Linear(32, 3)
    )


MODELS: dict[str, tuple[Callable[[], torch.nn.Module], tuple[int, ...]]] = {
    "transformer_encoder_layer": (transformer, (4, 6, 16)),
    "cnn_batchnorm": (SmallCNN, (4, 3, 8, 8)),
    "mlp": (mlp, (16, 12)),
}

needs_functionalize = pytest.mark.skipif(
    importlib.util.find_spec("conveyor_functionalize") is None,
    reason="BatchNorm2d updates its running statistics in place: needs the functionalize stage",
)


def train(model: torch.nn.Module, step: Callable[[torch.Tensor], torch.Tensor], batches, targets) -> list[float]:
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    for x, y in zip(batches, targets):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(step(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


@pytest.mark.parametrize(
    "name", [pytest.param(n, marks=needs_functionalize) if n == "cnn_batchnorm" else n for n in sorted(MODELS)]
)
def test_training_matches_eager(name: str, partitioner: str) -> None:
    make, shape = MODELS[name]
    torch.manual_seed(0)
    eager = make().double().train()
    model = copy.deepcopy(eager)
    compiled = pipeline(partitioner)(model)
    gen = torch.Generator().manual_seed(1)
    data = [torch.randn(shape, generator=gen, dtype=torch.float64) for _ in range(2)]
    with torch.no_grad():
        out_shape = copy.deepcopy(eager)(data[0]).shape  # a copy: BatchNorm would update its statistics
    goals = [torch.randn(out_shape, generator=gen, dtype=torch.float64) for _ in range(2)]
    batches, targets = [data[i % 2] for i in range(STEPS)], [goals[i % 2] for i in range(STEPS)]

    expected = train(eager, eager, batches, targets)
    got = train(model, compiled, batches, targets)

    assert labels(compiled) == ["forward", "backward"]
    torch.testing.assert_close(got, expected, rtol=1e-9, atol=1e-9)
    assert sum(expected[-2:]) < sum(expected[:2])  # it did train
    for (pname, e), (_, c) in zip(eager.state_dict().items(), model.state_dict().items()):
        torch.testing.assert_close(c, e, rtol=1e-8, atol=1e-9, msg=lambda m, pname=pname: f"{pname}: {m}")
