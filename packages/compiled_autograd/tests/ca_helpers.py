"""Models and comparisons with eager for the compiled-autograd tests."""

from __future__ import annotations

from collections.abc import Iterable

import torch
from torch import nn


def mlp(d_in: int = 4, hidden: int = 8, d_out: int = 2, act: type[nn.Module] = nn.Tanh) -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(d_in, hidden), act(), nn.Linear(hidden, d_out))


def assert_same_grads(eager: Iterable[torch.Tensor], compiled: Iterable[torch.Tensor], atol: float = 1e-5) -> None:
    """Gradients equal eager's: presence, layout, strides, values."""
    for i, (e, c) in enumerate(zip(list(eager), list(compiled), strict=True)):
        ge, gc = e.grad, c.grad
        assert (ge is None) == (gc is None), f"parameter {i}: .grad {gc} vs eager {ge}"
        if ge is None:
            continue
        assert gc.layout == ge.layout, f"parameter {i}: layout {gc.layout} vs eager {ge.layout}"
        if ge.layout is torch.strided:
            assert gc.stride() == ge.stride(), f"parameter {i}: strides {gc.stride()} vs eager {ge.stride()}"
        torch.testing.assert_close(gc.to_dense(), ge.to_dense(), atol=atol, rtol=1e-4)
