"""Under ``torch.compile(backend="conveyor")``: dynamo's fake mode, lifted
parameters, and symbolic shapes (saved symbols cross to the backward)."""

from __future__ import annotations

import copy

import conveyor
import torch
import torch._dynamo


def test_module_trains_under_dynamo() -> None:
    torch._dynamo.reset()
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.LayerNorm(16), torch.nn.Linear(16, 2))
    eager = copy.deepcopy(model)
    compiled = torch.compile(model, backend="conveyor", dynamic=False)
    for n in (4, 6, 4):
        x = torch.randn(n, 8)
        got, expected = compiled(x).square().sum(), eager(x).square().sum()
        got.backward()
        expected.backward()
        torch.testing.assert_close(got, expected)
        for p, q in zip(model.parameters(), eager.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
    assert [g.label for g in conveyor.last_graphs(compiled) if g.stage == "autograd" and not g.step] == ["forward", "backward"]


def test_symbolic_shapes_save_symbols_for_backward() -> None:
    torch._dynamo.reset()

    def f(x, w):
        return (x @ w).tanh().sum(0)

    compiled = torch.compile(f, backend="conveyor", dynamic=True)
    for n in (4, 6):
        x, w = torch.randn(n, 3, requires_grad=True), torch.randn(3, 5, requires_grad=True)
        compiled(x, w).sum().backward()
        got = (x.grad, w.grad)
        x.grad = w.grad = None
        f(x, w).sum().backward()
        torch.testing.assert_close(got, (x.grad, w.grad))
    (backward,) = [g.graph for g in conveyor.last_graphs(compiled) if (g.stage, g.label) == ("autograd", "backward")]
    inputs = [p.meta["val"] for p in backward.graph.nodes if p.op == "placeholder"]
    assert any(isinstance(v, torch.SymInt) for v in inputs)
