"""Forward and backward of real ``torch.nn`` modules through the full pipeline
(every installed stage) with the triton backend, against eager."""

from __future__ import annotations

import conveyor
import conveyor_triton
import pytest
import torch
from conveyor.testing import check
from torch import nn


class MLP(nn.Module):
    def __init__(self, d: int = 16, h: int = 32) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(d, h), nn.Linear(h, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(nn.functional.gelu(self.fc1(x)))


class NormBlock(nn.Module):
    """LayerNorm, GELU and softmax over the same rows."""

    def __init__(self, d: int = 16) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.norm(x)
        return torch.softmax(y, -1) * nn.functional.gelu(y) + y


def _encoder() -> nn.Module:
    torch.manual_seed(0)
    return nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, dropout=0.0, batch_first=True)


MODELS = [
    ("mlp", lambda: MLP(), (2, 5, 16)),
    ("norm_block", lambda: NormBlock(), (3, 7, 16)),
    ("layer_norm", lambda: nn.LayerNorm(16), (4, 16)),
    ("gelu", lambda: nn.GELU(), (4, 16)),
    ("softmax", lambda: nn.Softmax(-1), (4, 16)),
    ("transformer_encoder_layer", _encoder, (2, 5, 16)),
]


@pytest.mark.parametrize("name, make, shape", MODELS, ids=[m[0] for m in MODELS])
def test_forward_and_backward(name, make, shape, full_pipeline):
    torch.manual_seed(0)
    module = make()
    x = torch.randn(*shape, requires_grad=True)
    result = check(module, x, compile=full_pipeline, atol=1e-5, rtol=1e-4)
    assert any(r.kernels for r in conveyor_triton.reports(result.compiled))


def test_norm_block_kernel_counts(full_pipeline):
    """Layer norm, softmax and GELU over the same rows: one forward kernel; the
    backward's row reductions merge into one kernel and the weight / bias
    gradients (leading-dimension sums) into another."""
    torch.manual_seed(0)
    x = torch.randn(3, 7, 16, requires_grad=True)
    result = check(NormBlock(), x, compile=full_pipeline, atol=1e-5, rtol=1e-4)
    reports = {r.label: r for r in conveyor_triton.reports(result.compiled)}
    assert len(reports["forward"].kernels) == 1, str(reports["forward"])
    if "backward" in reports:
        assert len(reports["backward"].kernels) == 2, str(reports["backward"])


def test_mutating_program_without_functionalize(installed_plugins):
    """With functionalize off the backend receives in-place ops: it keeps them
    as aten calls in memory order and still fuses around them."""

    def f(a, b):
        a.mul_(2)
        c = a.sin() + b
        b.add_(c.sum(-1, keepdim=True))
        return c.softmax(-1), a.t()

    disabled = ["functionalize"] if "functionalize" in installed_plugins.stages() else []

    def compile(fn):
        return conveyor.compile(fn, plugins=installed_plugins, backend="triton", disable=disabled)

    result = check(f, torch.randn(4, 8), torch.randn(4, 8), compile=compile)
    reports = conveyor_triton.reports(result.compiled)
    assert any(r.kernels for r in reports)


def test_meta_dtype_that_differs_from_eager_runs_the_kernel_as_aten(full_pipeline):
    # Note [Meta dtypes that differ from eager]: batch norm's running stats on
    # bfloat16 CPU tensors are bfloat16 from the kernel, float32 from its meta;
    # the cast kernel generated for float32 would misread them (an interpreter
    # error on CPU), so it runs as aten calls, with a warning
    import torch.nn.functional as F

    def bn(x, mean, var, w, b):
        return F.batch_norm(x, mean, var, w, b, training=True, momentum=0.5, eps=0.6)

    args = [torch.randn(5, 5, 5), torch.randn(5), torch.rand(5) + 0.5, torch.randn(5), torch.randn(5)]
    with pytest.warns(UserWarning, match="runs as aten calls"):
        check(bn, *[a.to(torch.bfloat16) for a in args], compile=full_pipeline, atol=3e-2, rtol=2e-2)
