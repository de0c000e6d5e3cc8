"""What fails must fail as in eager, or with an error naming the stage."""

from __future__ import annotations

import conveyor
import conveyor_autograd.plugin
import pytest
import torch
from autograd_helpers import pipeline
from conveyor import Plugins, StageError


def f(x):
    return (x.sin() * x).sum()


def test_backward_twice_without_retain_graph_fails_as_in_eager(compile_with) -> None:
    x = torch.randn(4, requires_grad=True)
    eager = f(x)
    eager.backward()
    with pytest.raises(RuntimeError, match="backward through the graph a second time") as eager_exc:
        eager.backward()
    out = compile_with(f)(x)
    out.backward()
    with pytest.raises(RuntimeError) as compiled_exc:
        out.backward()
    assert str(compiled_exc.value).splitlines()[0] == str(eager_exc.value).splitlines()[0]


def test_backward_twice_with_retain_graph_accumulates(compile_with) -> None:
    x = torch.randn(4, requires_grad=True)
    y = x.detach().clone().requires_grad_()
    out = compile_with(f)(x)
    out.backward(retain_graph=True)
    out.backward()
    eager = f(y)
    eager.backward(retain_graph=True)
    eager.backward()
    torch.testing.assert_close(x.grad, y.grad)


def test_double_backward_raises_a_clear_error(compile_with) -> None:
    x = torch.randn(4, requires_grad=True)
    (g,) = torch.autograd.grad(compile_with(f)(x), x, create_graph=True)
    (expected,) = torch.autograd.grad(f(x), x)
    torch.testing.assert_close(g.detach(), expected)  # first order with create_graph still works
    with pytest.raises(RuntimeError, match="double backward through a compiled program is not supported"):
        g.sum().backward()
    with pytest.raises(RuntimeError, match="double backward through a compiled program is not supported"):
        torch.autograd.grad(g.sum(), x)  # reaches the error, not "not used in the graph"


def test_saved_input_modified_in_place_is_caught(compile_with) -> None:
    x = torch.randn(4, requires_grad=True)
    y = x * 1
    out = compile_with(lambda t: (t * t).sum())(y)
    with torch.no_grad():
        y.add_(1)
    with pytest.raises(RuntimeError, match="modified by an inplace operation"):
        out.backward()


def test_unknown_partitioner_names_the_valid_ones() -> None:
    compiled = pipeline("greedy")(f)
    with pytest.raises(StageError, match=r"autograd.*unknown partitioner 'greedy'.*min_cut.*save_eager"):
        compiled(torch.randn(3, requires_grad=True))


def test_in_place_graph_without_functionalize_is_a_stage_error(fresh_plugins: Plugins) -> None:
    fresh_plugins.register(conveyor_autograd.plugin, name="autograd")

    def mutating(x):
        y = x * 2
        y.add_(1)
        return y

    compiled = conveyor.compile(mutating, plugins=fresh_plugins, backend="eager")
    with pytest.raises(StageError, match=r"'autograd'.*writes with aten.add_.Tensor.*functionalize"):
        compiled(torch.randn(3, requires_grad=True))
    # inference needs no joint graph: it passes through
    with torch.no_grad():
        torch.testing.assert_close(compiled(torch.ones(3)), torch.full((3,), 3.0))


def test_changing_a_view_of_a_saved_result_fails_as_in_eager(compile_with) -> None:
    def f(x):
        return x.exp().view(-1)  # exp saves its result for backward

    x = torch.randn(3, 4, requires_grad=True)
    for fn in (f, compile_with(f)):
        out = fn(x)
        out.add_(1)
        with pytest.raises(RuntimeError, match="modified by an inplace operation"):
            out.sum().backward()


def _masked_assign(x, m, v):
    y = x * 2
    y[m] = v  # its gradient indexes with nonzero(m): a size only the values know
    return y


@pytest.mark.parametrize("entry", ["conveyor", "dynamo"])
def test_a_backward_with_a_data_dependent_size_runs_eagerly_decided_at_compile_time(entry, compile_with) -> None:
    """Note [Data-dependent sizes in a backward]: one warning when the forward
    compiles, then eager's values and gradients; never an error at backward time."""
    from conveyor.testing import check

    compile = compile_with if entry == "conveyor" else (lambda fn: torch.compile(fn, backend="conveyor"))
    x, v = torch.randn(5, requires_grad=True), torch.randn(3, requires_grad=True)
    m = torch.tensor([True, False, True, False, True])
    torch._dynamo.reset()
    with pytest.warns(UserWarning, match="stage 'autograd'.*depends on tensor values.*nonzero"):
        check(_masked_assign, x, m, v, compile=compile)
