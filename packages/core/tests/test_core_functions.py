"""Custom autograd Functions in a standalone capture (Note [Custom autograd
functions] in conveyor.frontend.functions): one node that keeps the Function's own
backward, the warned eager fallback where that cannot be, and inference."""

import warnings

import conveyor
import pytest
import torch
from conveyor.testing import check


class _StraightThroughRound(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.round()

    @staticmethod
    def backward(ctx, grad):
        return grad * 3  # not the derivative of round: only the custom backward gives it


def _with_custom_function(x):
    return _StraightThroughRound.apply(x * 2).sin()


def test_a_custom_autograd_function_needing_grad_is_one_node_with_its_own_backward():
    """Note [Custom autograd functions] in conveyor.frontend.functions."""
    compiled = conveyor.compile(_with_custom_function)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check(_with_custom_function, torch.randn(3, requires_grad=True), compile=lambda fn: compiled)
    code = conveyor.last_graphs(compiled)[0].graph.code
    assert "conveyor.apply_function" in code and "round" not in code


def test_a_custom_autograd_function_behind_dynamo_is_one_node_with_its_own_backward():
    """Note [Functions behind dynamo] in conveyor.frontend.functions."""
    torch._dynamo.reset()
    compiled = torch.compile(_with_custom_function, backend="conveyor")
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # dynamo itself warns a DeprecationWarning
        check(_with_custom_function, torch.randn(3, requires_grad=True), compile=lambda fn: compiled)
    code = conveyor.last_graphs(compiled)[0].graph.code
    assert "conveyor.apply_function" in code and "round" not in code


class _InPlace(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.mark_dirty(x)
        return x.mul_(2)

    @staticmethod
    def backward(ctx, grad):
        return grad * 2


def test_a_custom_autograd_function_that_cannot_be_one_node_runs_eagerly_with_a_warning():
    def fn(x):
        return _InPlace.apply(x * 1).sin()

    with pytest.warns(UserWarning, match="eagerly: .*_InPlace.*it writes to its inputs"):
        check(fn, torch.randn(3, requires_grad=True))


def test_a_custom_autograd_function_without_grad_still_compiles():
    compiled = conveyor.compile(_with_custom_function)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), _with_custom_function(x))
    assert conveyor.last_graphs(compiled)[0].stage == "capture"
