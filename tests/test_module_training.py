"""Training loops through both entry points, compared with an eager copy
step by step (CNN, tiny language model, LSTM, a graph break)."""

from __future__ import annotations

import copy
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import conveyor
import pytest
import torch
import torch.nn.functional as F
from conveyor.testing import check
from torch import nn

sys.path.insert(0, str(Path(__file__).parent))
from zoo_harness import (  # noqa: E402
    ENTRY_POINTS,
    TOL,
    TRITON_TOL,
    assert_same_state,
    conveyor_eager,
    conveyor_triton,
    dynamo_eager,
    dynamo_triton,
    entry_id,
    fresh_dynamo,  # noqa: E402,F401  (autouse)
)

# -- training loops ---------------------------------------------------------------


def small_cnn() -> tuple[nn.Module, Callable[[int], tuple[torch.Tensor, torch.Tensor]]]:
    model = nn.Sequential(
        nn.Conv2d(3, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(36, 3)
    )
    return model, lambda n: (torch.randn(n, 3, 6, 6), torch.randint(0, 3, (n,)))


class TinyLM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(12, 8)
        self.pos = nn.Parameter(torch.randn(6, 8) * 0.1)
        self.layer = nn.TransformerEncoderLayer(8, 2, 16, dropout=0.0, batch_first=True, norm_first=True)
        self.head = nn.Linear(8, 12)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        h = self.emb(idx) + self.pos[: idx.shape[1]]
        mask = nn.Transformer.generate_square_subsequent_mask(idx.shape[1])
        return self.head(self.layer(h, src_mask=mask, is_causal=True)).flatten(0, 1)


def tiny_lm() -> tuple[nn.Module, Callable[[int], tuple[torch.Tensor, torch.Tensor]]]:
    return TinyLM(), lambda n: (torch.randint(0, 12, (n, 5)), torch.randint(0, 12, (n * 5,)))


class LSTMClassifier(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(4, 6, batch_first=True)
        self.head = nn.Linear(6, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, (h, _) = self.lstm(x)
        return self.head(h[-1] + out.mean(1))


def lstm_classifier() -> tuple[nn.Module, Callable[[int], tuple[torch.Tensor, torch.Tensor]]]:
    return LSTMClassifier(), lambda n: (torch.randn(n, 5, 4), torch.randint(0, 3, (n,)))


def train_and_compare(make, compile: Callable[[Any], Any], steps: int = 5, **tol: float) -> None:
    model, batch = make()
    mirror = copy.deepcopy(model)
    compiled = compile(mirror)
    opt_e = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    opt_c = torch.optim.SGD(mirror.parameters(), lr=0.1, momentum=0.9)
    for step in range(steps):
        x, y = batch(4)
        loss_e, loss_c = F.cross_entropy(model(x), y), F.cross_entropy(compiled(x), y)
        torch.testing.assert_close(loss_c, loss_e, **tol, msg=lambda m, s=step: f"step {s} loss: {m}")
        opt_e.zero_grad(), opt_c.zero_grad()
        loss_e.backward(), loss_c.backward()
        opt_e.step(), opt_c.step()
    assert_same_state(mirror, model, f"after {steps} steps", **tol)


@pytest.mark.parametrize("compile", ENTRY_POINTS, ids=entry_id)
@pytest.mark.parametrize("make", [small_cnn, tiny_lm, lstm_classifier], ids=lambda f: f.__name__)
def test_training_loop_matches_eager(make, compile) -> None:
    train_and_compare(make, compile, **TRITON_TOL)


@pytest.mark.parametrize("compile", [conveyor_triton, dynamo_triton], ids=entry_id)
def test_training_loop_matches_eager_triton(compile) -> None:
    train_and_compare(small_cnn, compile, steps=3, **TRITON_TOL)


class DataDependent(nn.Module):
    """A branch on a tensor value: dynamo splits the program there."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU())
        self.b = nn.Linear(8, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.a(x)
        if y.mean() > 0.3:
            y = y * 2
        return self.b(y)


def data_dependent() -> tuple[nn.Module, Callable[[int], tuple[torch.Tensor, torch.Tensor]]]:
    step = iter(range(100))
    return DataDependent(), lambda n: (torch.randn(n, 4) + 0.3 * next(step), torch.randint(0, 3, (n,)))


def test_training_loop_across_a_graph_break() -> None:
    train_and_compare(data_dependent, dynamo_eager, **TRITON_TOL)


def test_lstm_traced_by_dynamo_with_allow_rnn() -> None:
    # with allow_rnn dynamo hands nn.LSTM to conveyor: the autograd stage's
    # forward must still produce the oneDNN workspace its backward reads
    with torch._dynamo.config.patch(allow_rnn=True):
        check(nn.LSTM(4, 5, batch_first=True), torch.randn(2, 3, 4), compile=dynamo_eager, **TOL)
    graphs = conveyor.dynamo.last_dynamo_graphs()  # conveyor compiled it (no fallback to eager)
    assert any("mkldnn_rnn_layer" in g.graph.code for g in graphs)


# -- bfloat16 ---------------------------------------------------------------------


def test_bfloat16_model_through_triton_matches_eager() -> None:
    # before the interpreter's roundings were written out, outputs and
    # gradients came out a few bfloat16 ulps off eager (3% on a bias gradient)
    model = nn.Sequential(nn.Linear(4, 4), nn.GELU(), nn.Linear(4, 3), nn.SiLU()).to(torch.bfloat16)
    check(model, torch.randn(3, 4, dtype=torch.bfloat16), compile=conveyor_triton)


def test_autocast_under_torch_compile_triton_matches_eager() -> None:
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    compiled = dynamo_triton(copy.deepcopy(model))
    x = torch.randn(3, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected, got = model(x), compiled(x)
    assert got.dtype == expected.dtype == torch.bfloat16
    torch.testing.assert_close(got, expected)


# -- documented limits and known problems ------------------------------------------


def test_batchnorm_cumulative_average_compiles_through_dynamo() -> None:
    # momentum=None reads num_batches_tracked as a Python float: one graph cannot
    # hold it, so conveyor.compile compiles through dynamo, which splits there
    # (core Note [Programs only dynamo can split])
    model = nn.Sequential(nn.Linear(4, 3), nn.BatchNorm1d(3, momentum=None))
    with pytest.warns(UserWarning, match="through dynamo"):
        check(model, torch.randn(4, 4), compile=conveyor_eager, **TOL)
    check(model, torch.randn(4, 4), compile=dynamo_eager, **TOL)


class PlainTensorAttribute(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.mask = torch.tril(torch.ones(4, 4))  # neither a parameter nor a buffer

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.lin(x) * self.mask


@pytest.mark.parametrize("compile", ENTRY_POINTS, ids=entry_id)
def test_plain_tensor_attribute(compile) -> None:
    # conveyor.compile: a tensor the program closes over becomes a graph input
    # (Note [Tensors a program closes over]); before, capture failed with
    # "Please convert all Tensors to FakeTensors first"
    check(PlainTensorAttribute(), torch.randn(4, 4), compile=compile, **TOL)


@pytest.mark.parametrize("compile", [conveyor_eager, conveyor_triton], ids=entry_id)
def test_autocast_state_is_part_of_the_conveyor_compile_cache_key(compile) -> None:
    # the program captured under autocast (with its casts to bfloat16) must not
    # be reused outside it, nor the one captured outside it under autocast
    model = nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2))
    compiled = compile(copy.deepcopy(model))
    x = torch.randn(3, 4)
    for autocast in (True, False, True):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
            expected, got = model(x), compiled(x)
        assert got.dtype == expected.dtype, f"autocast={autocast}: {got.dtype} != eager {expected.dtype}"
        torch.testing.assert_close(got, expected, msg=lambda m, a=autocast: f"autocast={a}: {m}")


# Note [Python kernels that differ from eager] (conveyor_functionalize.decompositions):
# under the Python dispatcher torch replaces these ops with Python decompositions
# that differ from eager (torch.compile(backend="aot_eager") inherits both); the
# functional graph keeps the ops, and the triton backend keeps their eager kernels.
@pytest.mark.parametrize("compile", [conveyor_eager, conveyor_triton], ids=entry_id)
@pytest.mark.parametrize("module", [nn.Softshrink(0.3), nn.Hardshrink(0.3)], ids=["softshrink", "hardshrink"])
def test_shrink_gradient_at_nan(compile, module) -> None:
    # softshrink's decomposition gives 0 at NaN, eager's backward passes the incoming
    # gradient; hardshrink's agrees with eager (kept here as its guard)
    x = torch.tensor([0.1, 1.0, -1.0, float("nan")], requires_grad=True)
    check(module, x, compile=compile)


@pytest.mark.parametrize("compile", [*ENTRY_POINTS, conveyor_triton], ids=entry_id)
def test_multilabel_margin_loss_over_a_batch(compile) -> None:
    # the decomposition broadcasts the gathered (C, N, 1) targets against the (N, C) input
    x, target = torch.randn(2, 4, requires_grad=True), torch.tensor([[3, 0, -1, 1], [1, 2, 3, -1]])
    check(nn.MultiLabelMarginLoss(), x, target, compile=compile, **TOL)
