"""Ops whose result depends on grad mode (Note [Grad mode in the compiled forward])."""

from __future__ import annotations

import conveyor
import pytest
import torch
from conveyor.testing import check
from conveyor_autograd.grad_mode_ops import GRAD_MODE_ON
from torch import nn


@pytest.mark.parametrize("batch_first", [False, True])
def test_lstm_trains_through_the_compiled_forward(compile_with, batch_first: bool) -> None:
    # regression: the compiled forward runs with grad mode off, where oneDNN's
    # LSTM layer leaves its workspace undefined; the backward then failed with
    # "Expected a proper Tensor but got None ... for argument #22 'workspace'"
    lstm = nn.LSTM(4, 5, batch_first=batch_first)
    check(lstm, torch.randn(2, 3, 4), compile=compile_with, atol=1e-5, rtol=1e-4)


def test_the_forward_graph_calls_the_grad_mode_on_op(compile_with) -> None:
    compiled = compile_with(nn.LSTM(4, 5))
    compiled(torch.randn(3, 2, 4))
    (forward,) = [g.graph for g in conveyor.last_graphs(compiled) if (g.stage, g.label) == ("eager", "forward")]
    targets = {n.target for n in forward.graph.nodes if n.op == "call_function"}
    assert GRAD_MODE_ON[torch.ops.aten.mkldnn_rnn_layer.default] in targets
    assert torch.ops.aten.mkldnn_rnn_layer.default not in targets


def test_the_grad_mode_on_op_computes_the_workspace_with_grad_mode_off() -> None:
    lstm = nn.LSTM(4, 5)
    args = (torch.randn(3, 2, 4), *lstm.parameters(), torch.zeros(2, 5), torch.zeros(2, 5))
    flags = (False, [], 2, 5, 1, True, False, False, True)
    with torch.no_grad():
        plain = torch.ops.aten.mkldnn_rnn_layer.default(*args, *flags)
        on = GRAD_MODE_ON[torch.ops.aten.mkldnn_rnn_layer.default](*args, *flags)
    assert plain[3] is None  # what made the compiled backward fail
    assert isinstance(on[3], torch.Tensor) and on[3].numel() > 0
    for a, b in zip(on[:3], plain[:3], strict=True):
        torch.testing.assert_close(a, b)
        assert not a.requires_grad
