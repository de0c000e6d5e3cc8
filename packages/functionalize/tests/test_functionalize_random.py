"""Random in-place ops keep eager's numbers after functionalization."""

from __future__ import annotations

import conveyor
import conveyor_functionalize.plugin
import pytest
import torch
import torch.nn.functional as F
from conveyor.testing import check


def compile_eager(fn):
    plugins = conveyor.Plugins()
    plugins.register(conveyor_functionalize.plugin, name="functionalize")
    return conveyor.compile(fn, plugins=plugins, backend="eager")


@pytest.mark.parametrize(
    ("shape", "view"),
    [((4, 6), lambda x: x), ((4, 6), lambda x: x.t()), ((4, 6, 5), lambda x: x.permute(1, 0, 2).unsqueeze(1))],
    ids=["contiguous", "transposed", "permuted"],
)
@pytest.mark.parametrize("requires_grad", [False, True])
def test_dropout_draws_the_same_mask_as_eager(shape, view, requires_grad: bool) -> None:
    x = torch.randn(shape, requires_grad=requires_grad)
    check(lambda t: F.dropout(view(t), 0.5, True), x, compile=compile_eager)


def test_bernoulli_into_a_transposed_intermediate() -> None:
    def f(x):
        mask = torch.empty_like(x.t()).bernoulli_(0.3)
        return x.t() * mask

    check(f, torch.randn(5, 7), compile=compile_eager)
