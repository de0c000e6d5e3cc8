"""Note [Simplified segments] and Note [Sizes as ints]: the rewrites give eager's values, and the
captured backward of a transformer block keeps eager's gradients with them applied."""

from __future__ import annotations

import copy

import conveyor
import conveyor_compiled_autograd as cca
import torch
from conveyor_compiled_autograd.simplify import simplify
from torch import nn
from torch.fx.experimental.proxy_tensor import make_fx

aten = torch.ops.aten


def _targets(gm: torch.fx.GraphModule) -> list[object]:
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def test_stack_replaces_select_backwards_covering_every_index() -> None:
    def f(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        s = aten.add.Tensor(aten.select_backward(b, [3, 3, 5], 1, 1), aten.select_backward(a, [3, 3, 5], 1, -3))
        s = aten.add.Tensor(s, aten.select_backward(c, [3, 3, 5], 1, 2))
        return s, aten.mm(aten.t(aten.t(w)), w)

    args = (torch.randn(3, 5), torch.randn(3, 5), torch.randn(3, 5), torch.randn(4, 4))
    gm = make_fx(f)(*args)
    assert simplify(gm) == 2
    targets = _targets(gm)
    assert aten.stack.default in targets and aten.select_backward.default not in targets and aten.t.default not in targets
    for want, got in zip(f(*args), gm(*args), strict=True):
        assert torch.equal(want, got) and want.stride() == got.stride()


def test_partial_or_shared_select_backwards_are_kept() -> None:
    def partial(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:  # index 2 missing
        return aten.add.Tensor(aten.select_backward(a, [3, 5], 0, 0), aten.select_backward(b, [3, 5], 0, 1))

    def shared(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:  # a partial sum read twice
        x = aten.select_backward(a, [2, 5], 0, 0)
        return aten.add.Tensor(x, aten.select_backward(b, [2, 5], 0, 1)), x

    args = (torch.randn(5), torch.randn(5))
    for f in (partial, shared):
        gm = make_fx(f)(*args)
        assert simplify(gm) == 0
        assert aten.stack.default not in _targets(gm)


def test_a_transformer_block_keeps_eager_gradients() -> None:
    torch.manual_seed(0)
    ref = nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.0, batch_first=True)
    model = copy.deepcopy(ref)
    block = conveyor.compile(model)
    x = torch.randn(2, 8, 32)
    with cca.enable() as session:
        for _ in range(2):
            for p in (*ref.parameters(), *model.parameters()):
                p.grad = None
            block(x).pow(2).sum().backward()
            with torch._dynamo.compiled_autograd._disable():
                ref(x).pow(2).sum().backward()
            for a, b in zip(ref.parameters(), model.parameters(), strict=True):
                torch.testing.assert_close(b.grad, a.grad, rtol=1e-5, atol=1e-5)
        assert session.last is not None and session.last.inlined == 1
        final = session.last.graphs[-1].graph
        assert aten.stack.default in _targets(final)  # the in-projection's q, k, v gradients
