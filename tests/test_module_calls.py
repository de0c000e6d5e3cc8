"""Several calls on one compiled module: sizes, train/eval and grad modes,
hooks, accumulated gradients and dropout masks across calls, each compared
with an eager copy of the module call by call."""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from conveyor.testing import check
from torch import nn

sys.path.insert(0, str(Path(__file__).parent))
from module_zoo import Residual  # noqa: E402
from zoo_harness import (  # noqa: E402
    ALL_ENTRY_POINTS,
    ENTRY_POINTS,
    TOL,
    TRITON_TOL,
    assert_same_state,
    dynamo_eager,
    entry_id,
    fresh_dynamo,  # noqa: E402,F401  (autouse)
)


def compare_calls(
    eager: nn.Module, compile: Callable[[Any], Any], calls: list[tuple[Any, ...]], *, grads: bool = True, **tol: float
) -> None:
    """Call ``eager`` and a compiled copy on each argument tuple in turn;
    compare outputs, parameter gradients and the state after each call."""
    mirror = copy.deepcopy(eager)
    compiled = compile(mirror)
    for k, args in enumerate(calls):
        expected, got = eager(*args), compiled(*args)
        torch.testing.assert_close(got, expected, **tol, msg=lambda m, k=k: f"call {k}: {m}")
        if grads and expected.requires_grad:
            weight = torch.randn(expected.shape)
            e = torch.autograd.grad((expected * weight).sum(), list(eager.parameters()))
            c = torch.autograd.grad((got * weight).sum(), list(mirror.parameters()))
            for j, (a, b) in enumerate(zip(c, e, strict=True)):
                torch.testing.assert_close(a, b, **tol, msg=lambda m, k=k, j=j: f"call {k} gradient {j}: {m}")
        assert_same_state(mirror, eager, f"call {k}", **tol)


@pytest.mark.parametrize("compile", ALL_ENTRY_POINTS, ids=entry_id)
def test_batch_size_changes_between_calls(compile) -> None:
    # under torch.compile the second size recompiles with a dynamic batch
    model = nn.Sequential(nn.Linear(4, 8), nn.LayerNorm(8), nn.GELU(), nn.Linear(8, 2))
    compare_calls(model, compile, [(torch.randn(n, 4),) for n in (2, 3, 5)], **TRITON_TOL)


@pytest.mark.parametrize("compile", ENTRY_POINTS, ids=entry_id)
def test_batch_size_changes_with_batchnorm_in_training(compile) -> None:
    # running statistics use the (dynamic) batch size: n / (n - 1)
    compare_calls(Residual(), compile, [(torch.randn(n, 4, 5, 5),) for n in (2, 3)], **TRITON_TOL)


def test_sequence_length_changes_between_calls() -> None:
    # torch.compile: a dynamic sequence length from the second call on (attention, softmax over it)
    layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True)
    compare_calls(layer, dynamo_eager, [(torch.randn(2, n, 8),) for n in (3, 5)], **TRITON_TOL)


@pytest.mark.parametrize("compile", ENTRY_POINTS, ids=entry_id)
def test_train_eval_switches_between_calls(compile) -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4), nn.Dropout(0.5))
    mirror = copy.deepcopy(model)
    compiled = compile(mirror)
    x = torch.randn(5, 4)
    model.eval(), mirror.eval()
    torch.testing.assert_close(compiled(x), model(x), msg="after eval()")
    model[1].train(), mirror[1].train()
    torch.testing.assert_close(compiled(x), model(x), msg="one submodule back in train()")
    assert_same_state(mirror, model, "after the calls")


@pytest.mark.parametrize("compile", ALL_ENTRY_POINTS, ids=entry_id)
def test_eval_under_no_grad_and_inference_mode(compile) -> None:
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten()
    ).eval()
    compiled = compile(copy.deepcopy(model))
    x = torch.randn(2, 3, 5, 5)
    with torch.no_grad():
        expected, got = model(x), compiled(x)
    torch.testing.assert_close(got, expected, **TRITON_TOL)
    assert not got.requires_grad
    with torch.inference_mode():
        expected, got = model(x), compiled(x)
    torch.testing.assert_close(got, expected, **TRITON_TOL)
    assert got.is_inference()
    expected, got = model(x), compiled(x)  # and with grad again
    torch.testing.assert_close(got, expected, **TRITON_TOL)
    assert got.requires_grad


@pytest.mark.parametrize("compile", ENTRY_POINTS, ids=entry_id)
def test_training_module_under_inference_mode_updates_buffers(compile) -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.BatchNorm1d(4)).train()
    mirror = copy.deepcopy(model)
    compiled = compile(mirror)
    x = torch.randn(5, 4)
    with torch.inference_mode():
        torch.testing.assert_close(compiled(x), model(x))
    assert_same_state(mirror, model, "after the call")


@pytest.mark.parametrize("compile", ENTRY_POINTS, ids=entry_id)
def test_hooks_registered_before_compiling_run(compile) -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    model[0].register_forward_hook(lambda mod, inp, out: out * 3)
    model[2].register_forward_pre_hook(lambda mod, inp: (inp[0] - 1,))
    check(model, torch.randn(3, 4), compile=compile, **TOL)


@pytest.mark.parametrize("compile", ENTRY_POINTS, ids=entry_id)
def test_gradients_accumulate_over_calls_with_retain_graph(compile) -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.Tanh(), nn.Linear(4, 1))
    mirror = copy.deepcopy(model)
    compiled = compile(mirror)
    for _ in range(3):
        x = torch.randn(3, 4)
        e, c = model(x).pow(2).mean(), compiled(x).pow(2).mean()
        e.backward(retain_graph=True), c.backward(retain_graph=True)
        e.backward(), c.backward()
    for p, q in zip(model.parameters(), mirror.parameters(), strict=True):
        torch.testing.assert_close(q.grad, p.grad, **TOL)


@pytest.mark.parametrize("compile", ENTRY_POINTS, ids=entry_id)
def test_dropout_in_training_backward_uses_the_forward_mask(compile) -> None:
    # random numbers may differ from eager's; the gradient must follow the
    # mask the forward drew (a recomputed dropout would draw another)
    class Drop(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.w = nn.Parameter(torch.randn(50, 50))

        def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
            z = F.dropout(torch.relu(x) * 2, 0.5, True)
            return torch.sin(z) @ self.w, z

    compiled = compile(Drop())
    x = torch.randn(40, 50, requires_grad=True)
    y, z = compiled(x)
    (g,) = torch.autograd.grad(y.sum(), x)
    dropped = (z == 0) & (x > 0)
    assert dropped.any() and (g[dropped] == 0).all()
    kept = (z != 0) & (x > 0)
    assert (g[kept] != 0).all()
