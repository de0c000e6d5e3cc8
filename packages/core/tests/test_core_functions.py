"""Custom autograd Functions in a standalone capture (Note [Custom autograd
functions] in conveyor.frontend.functions): one node that keeps the Function's own
backward, the warned eager fallback where that cannot be, and inference."""

import operator
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


class _AndAView(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        c = x.clone()
        return c, c[:3]

    @staticmethod
    def backward(ctx, g, g_view):
        out = g.clone()
        out[:3] += g_view
        return out


@pytest.mark.parametrize("entry", ["conveyor", "dynamo"])
def test_a_custom_autograd_function_returning_outputs_that_share_memory_runs_eagerly_with_a_warning(entry):
    """Regression: a custom op's outputs may not alias each other, so torch's check
    raised a RuntimeError when the program ran (Note [Forward-body outputs no one
    reads] in conveyor.frontend.functions)."""

    def fn(x):
        return _AndAView.apply(x * 1)

    torch._dynamo.reset()
    compiled = conveyor.compile(fn) if entry == "conveyor" else torch.compile(fn, backend="conveyor")
    with pytest.warns(UserWarning, match="eagerly: .*it returns outputs that share memory"):
        check(fn, torch.randn(5, 2, requires_grad=True), compile=lambda _: compiled)


class _ViewOfIntermediate(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()[:3]

    @staticmethod
    def backward(ctx, g):
        out = g.new_zeros(5, 2)
        out[:3] = g
        return out


def _dynamo_graph_returning_an_intermediate() -> torch.fx.GraphModule:
    """dynamo's graph of ``_ViewOfIntermediate.apply(x * 1)`` as torch 2.11 makes
    it: the forward body returns the clone (an intermediate) beside the view, the
    backward body takes an unused gradient for it, the outer graph reads item 0."""

    class Fwd(torch.nn.Module):
        def forward(self, x):
            c = x.clone()
            return (c[:3], c), ()

    class Bwd(torch.nn.Module):
        def forward(self, g, unused_0):
            return (torch.nn.functional.pad(g, (0, 0, 0, 2)),)

    root = torch.nn.Module()
    root.fwd_body_0, root.bwd_body_0 = torch.fx.symbolic_trace(Fwd()), torch.fx.symbolic_trace(Bwd())
    graph = torch.fx.Graph()
    arg = graph.call_function(operator.mul, (graph.placeholder("x"), 1))
    fwd, bwd = graph.get_attr("fwd_body_0"), graph.get_attr("bwd_body_0")
    hop = torch.ops.higher_order.autograd_function_apply
    applied = graph.call_function(hop, (fwd, bwd, arg), {"non_differentiable_idx": [], "saved_for_backward_idx": []})
    graph.output((graph.call_function(operator.getitem, (applied, 0)),))
    return torch.fx.GraphModule(root, graph)


def test_a_forward_body_output_the_outer_graph_does_not_read_is_not_an_output_of_the_node():
    """Regression (torch 2.11, test_autograd_function_programs' view_of_intermediate
    behind dynamo): the node returned the intermediate too, the base of the view it
    returns, and torch's check that a custom op's outputs do not alias raised a
    RuntimeError at run time (Note [Forward-body outputs no one reads])."""
    from conveyor.frontend import functions

    traced = functions.with_functions_as_nodes(_dynamo_graph_returning_an_intermediate())

    def program(x):
        return traced(x)[0]

    compiled = conveyor.compile(program)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # one node, no eager fallback
        check(
            lambda x: _ViewOfIntermediate.apply(x * 1),
            torch.randn(5, 2, requires_grad=True),
            compile=lambda _: compiled,
        )
    assert "conveyor.apply_function" in conveyor.last_graphs(compiled)[0].graph.code
