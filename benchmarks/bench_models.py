"""The small torch.nn models the triton benchmarks share (``triton_kernels.py``,
``triton_ptx.py``): an MLP, a LayerNorm/GELU/softmax block over the same
rows, and ``nn.TransformerEncoderLayer``."""

from __future__ import annotations

import torch
from torch import nn


class MLP(nn.Module):
    def __init__(self, d: int = 256, h: int = 1024) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, h), nn.Linear(h, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(nn.functional.gelu(self.fc1(x)))


class NormBlock(nn.Module):
    def __init__(self, d: int = 256) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(x)
        return torch.softmax(y, -1) * nn.functional.gelu(y) + y


def encoder() -> nn.Module:
    return nn.TransformerEncoderLayer(d_model=256, nhead=4, dim_feedforward=1024, dropout=0.0, batch_first=True)
