"""Real torch.nn modules through the whole installed pipeline, both entry
points, checked against eager by the shared checker."""

import conveyor
import pytest
import torch
from conveyor.testing import check
from torch import nn


def mlp():
    return nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 4)), (torch.randn(3, 8),)


def cnn_bn_train():
    m = nn.Sequential(nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten())
    return m.train(), (torch.randn(2, 3, 6, 6),)


def cnn_bn_eval():
    m, args = cnn_bn_train()
    return m.eval(), args


def transformer_layer():
    m = nn.TransformerEncoderLayer(d_model=16, nhead=4, dim_feedforward=32, dropout=0.0, batch_first=True)
    return m, (torch.randn(2, 5, 16),)


def layernorm_softmax():
    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm = nn.LayerNorm(12)
            self.proj = nn.Linear(12, 12)

        def forward(self, x):
            return torch.softmax(self.proj(self.norm(x)), dim=-1)

    return Block(), (torch.randn(4, 12),)


def embedding_bag():
    class Emb(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(10, 6)
            self.out = nn.Linear(6, 2)

        def forward(self, idx):
            return self.out(self.emb(idx).mean(1))

    return Emb(), (torch.randint(0, 10, (3, 4)),)


def buffer_update():
    class Counter(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.register_buffer("calls", torch.zeros(()))
            self.register_buffer("ema", torch.zeros(4))

        def forward(self, x):
            self.calls += 1
            y = self.lin(x)
            with torch.no_grad():
                self.ema.mul_(0.9).add_(0.1 * y.mean(0))
            return y

    return Counter(), (torch.randn(3, 4),)


MODELS = [mlp, cnn_bn_train, cnn_bn_eval, transformer_layer, layernorm_softmax, embedding_bag, buffer_update]


@pytest.mark.parametrize("make", MODELS, ids=lambda f: f.__name__)
def test_model_through_conveyor_compile(make):
    model, args = make()
    check(model, *args, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("make", MODELS, ids=lambda f: f.__name__)
def test_model_through_torch_compile(make):
    torch._dynamo.reset()
    model, args = make()
    check(model, *args, compile=lambda m: torch.compile(m, backend="conveyor"), atol=1e-5, rtol=1e-4)


def test_every_installed_wrapper_stage_can_be_switched_off():
    model, args = transformer_layer()
    wrappers = [s.name for s in conveyor.Pipeline(conveyor.resolve()).stages if s.kind == "wrapper"]
    for name in wrappers:
        check(model, *args, compile=lambda m, n=name: conveyor.compile(m, disable=[n]), atol=1e-5, rtol=1e-4)
