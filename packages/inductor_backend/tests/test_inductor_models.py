"""Real ``torch.nn`` models through the ``inductor`` backend, trained against
eager: a small transformer stack on both entry points, a module that writes
its buffers, and compiled autograd's whole-backward graphs."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import conveyor
import conveyor_compiled_autograd as cca
import pytest
import torch
from conveyor.testing import check
from conveyor_inductor import programs
from torch import nn


def transformer_stack() -> nn.Module:
    torch.manual_seed(0)
    layer = nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True, norm_first=True)
    return nn.TransformerEncoder(layer, 2, enable_nested_tensor=False)


def standalone(f: Any) -> Any:
    return conveyor.compile(f, backend="inductor")


def behind_dynamo(f: Any) -> Any:
    return torch.compile(f, backend="conveyor", options={"backend": "inductor"})


@pytest.mark.parametrize(
    "entry",
    [pytest.param(standalone, marks=pytest.mark.slow), pytest.param(behind_dynamo, marks=pytest.mark.slow)],
    ids=["conveyor.compile", "torch.compile"],
)
def test_transformer_stack_trains_as_eager(entry: Callable[..., Any]) -> None:
    checked = check(transformer_stack(), torch.randn(3, 5, 16), compile=entry, atol=1e-5, rtol=1e-4)
    assert [p.label for p in programs(checked.compiled)] == ["forward", "backward"]


class RunningMean(nn.Module):
    """Writes a buffer in forward (functionalize replays it after Inductor's graph)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(6, 6)
        self.register_buffer("running", torch.zeros(6))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.lin(x)
        self.running.mul_(0.9).add_(y.detach().mean(0), alpha=0.1)
        return y * self.running


def test_buffer_writes_are_replayed_around_inductors_graph() -> None:
    torch.manual_seed(0)
    check(RunningMean(), torch.randn(4, 6), compile=standalone)


@pytest.mark.slow
def test_compiled_autograd_backward_through_inductor() -> None:
    model, x = transformer_stack(), torch.randn(3, 5, 16)
    reference = transformer_stack()
    reference(x).square().mean().backward()
    compiled = conveyor.compile(model, backend="inductor")
    with cca.enable(backend="inductor") as session:
        compiled(x).square().mean().backward()
    assert session.captures == 1
    for p, q in zip(model.parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-5, rtol=1e-4)


def patch_embedding() -> nn.Module:
    """ViT's stem: a strided convolution whose output the backward needs."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 16, 4, stride=4), nn.Flatten(2), nn.GELU(), nn.Linear(16, 4))


def test_a_convolutions_saved_output_keeps_its_layout_for_the_backward() -> None:
    # Inductor returns a convolution's output channels-last unless told to keep the graph's strides;
    # the backward graph was traced with the graph's (Note [Layouts in the inductor backend])
    check(patch_embedding(), torch.randn(2, 3, 16, 16), compile=standalone, atol=1e-5, rtol=1e-4)


def test_the_retrace_reads_views_as_reshapes() -> None:
    # GPT-2's attention (tests/test_hf_inductor.py) has a view that Inductor's decompositions make
    # unviewable; the retrace reshapes instead, as Inductor's own view_to_reshape does
    from conveyor_inductor import layouts
    from torch.fx.experimental.proxy_tensor import make_fx

    def f(x: torch.Tensor) -> torch.Tensor:
        return x.view(4, 6).t().reshape(24)  # a view, then a reshape that copies

    gm = make_fx(f)(torch.randn(2, 12))
    reshaped = layouts.with_reshapes(gm)
    targets = [n.target for n in reshaped.graph.nodes if n.op == "call_function"]
    assert torch.ops.aten.view.default not in targets and torch.ops.aten.reshape.default in targets
    assert torch.ops.aten.view.default in [n.target for n in gm.graph.nodes]  # the received graph is untouched
    x = torch.randn(2, 12)
    assert torch.equal(reshaped(x), f(x))
