"""``conveyor.last_graphs`` of a ``torch.compile``'d object: that object's
graphs (Note [Graphs of a torch.compile'd object])."""

import conveyor
import pytest
import torch


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def ops(graphs) -> set[str]:
    """The aten ops the captured graphs call."""
    return {
        str(n.target).split(".")[1]
        for g in graphs
        if g.stage == "capture"
        for n in g.graph.graph.nodes
        if n.op == "call_function" and str(n.target).startswith("aten.")
    }


class Sin(torch.nn.Module):
    def forward(self, x):
        return x.sin() * 2


class Cos(torch.nn.Module):
    def forward(self, x):
        return x.cos() + 1


def test_each_compiled_module_gives_its_own_graphs():
    sin, cos = torch.compile(Sin(), backend="conveyor"), torch.compile(Cos(), backend="conveyor")
    sin(torch.randn(3))
    cos(torch.randn(3))
    assert "sin" in ops(conveyor.last_graphs(sin)) and "cos" not in ops(conveyor.last_graphs(sin))
    assert "cos" in ops(conveyor.last_graphs(cos)) and "sin" not in ops(conveyor.last_graphs(cos))
    graphs = conveyor.last_graphs(sin)
    assert graphs[0].stage == "capture" and graphs[-1].stage == "eager"


def test_functions_and_module_compile_give_their_own_graphs():
    def f(x):
        return x.tanh()

    def g(x):
        return x.exp()

    f_c, g_c = torch.compile(f, backend="conveyor"), torch.compile(g, backend="conveyor")
    m = Sin()
    m.compile(backend="conveyor")
    m(torch.randn(2))
    g_c(torch.randn(2))
    f_c(torch.randn(2))
    assert ops(conveyor.last_graphs(f_c)) == {"tanh"}
    assert ops(conveyor.last_graphs(g_c)) == {"exp"}
    assert "sin" in ops(conveyor.last_graphs(m))


def test_an_object_conveyor_never_compiled_is_a_clear_error():
    def f(x):
        return x + 1

    with pytest.raises(ValueError, match="conveyor compiled no graph for"):
        conveyor.last_graphs(torch.compile(f, backend="conveyor"))  # not called yet
    with pytest.raises(ValueError, match="conveyor compiled no graph for the module Cos"):
        conveyor.last_graphs(Cos())
    eager = torch.compile(f, backend="eager")
    eager(torch.ones(2))
    with pytest.raises(ValueError, match="conveyor compiled no graph"):
        conveyor.last_graphs(eager)


def test_a_graph_break_gives_the_graphs_the_last_call_ran():
    def f(x):
        y = x.sin()
        if y.sum() > 0:
            return y.exp()
        return y.tanh()

    f_c = torch.compile(f, backend="conveyor")
    f_c(torch.ones(3))
    assert ops(conveyor.last_graphs(f_c)) >= {"sin", "exp"} and "tanh" not in ops(conveyor.last_graphs(f_c))
    f_c(-torch.ones(3))
    assert ops(conveyor.last_graphs(f_c)) >= {"sin", "tanh"} and "exp" not in ops(conveyor.last_graphs(f_c))
    stages = [g.stage for g in conveyor.last_graphs(f_c)]
    assert stages.count("capture") == 2  # the entry graph, then the branch it took


class Broken(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x).relu()
        torch._dynamo.graph_break()
        return self.lin(y).sigmoid()


def test_a_module_with_a_graph_break_owns_its_resumed_graph():
    m, other = torch.compile(Broken(), backend="conveyor"), torch.compile(Sin(), backend="conveyor")
    m(torch.randn(2, 4))
    other(torch.randn(2))
    assert ops(conveyor.last_graphs(m)) >= {"relu", "sigmoid"}
    assert "sin" not in ops(conveyor.last_graphs(m))


def test_a_recompile_replaces_the_graphs_it_guards_out():
    f_c = torch.compile(lambda x: x.sin(), backend="conveyor", dynamic=False)
    f_c(torch.randn(3))
    f_c(torch.randn(5))
    graphs = conveyor.last_graphs(f_c)
    assert [g.stage for g in graphs].count("capture") == 1
    (x,) = [n for n in graphs[0].graph.graph.nodes if n.op == "placeholder"]
    assert tuple(x.meta["val"].shape) == (5,)
