"""Gradient cuts below autograd (core Note [Gradient cuts below autograd]).

torch 2.14's ``make_fx`` records ``detach`` as ``aten.alias`` unless it is
given a decomposition table, and every gradient cut of a program then
vanished silently. These tests hold on every supported torch: the cut is
recorded, and a trace that loses one fails loudly. (Compiled programs that
cut gradients: ``tests/test_grad_cuts.py``, with every stage.)
"""

from __future__ import annotations

import pytest
import torch
from conveyor.analysis.grad_regions import probe_detach_recording, trace_below_autograd
from conveyor.errors import CaptureError
from conveyor.testing import check

aten = torch.ops.aten


def test_the_installed_torch_records_detach_as_a_cut() -> None:
    probe_detach_recording()  # raises CaptureError naming what torch records instead


def test_every_trace_records_detach_whatever_make_fx_defaults_to() -> None:
    gm = trace_below_autograd(lambda x: (x.detach().sin(), x * 2))(torch.randn(3, requires_grad=True))
    targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    assert aten.detach.default in targets and aten.alias.default not in targets


def test_a_trace_that_loses_a_cut_fails_loudly() -> None:
    """What torch 2.14's default table does to ``detach``, given explicitly:
    the per-op check refuses the trace rather than dropping the cut."""
    losing = {aten.detach.default: lambda x: aten.alias.default(x)}
    with pytest.raises(CaptureError, match="gradient cut would be lost"):
        trace_below_autograd(lambda x: x.detach() * 2, decomposition_table=losing)(torch.randn(3))



class _RoundStraightThrough(torch.autograd.Function):
    """round() forward, identity backward: a gradient the inlined forward would not give."""

    @staticmethod
    def forward(ctx, x):
        return torch.round(x)

    @staticmethod
    def backward(ctx, g):
        return g


def test_a_function_applied_through_an_apply_taken_before_the_compile_runs_eagerly() -> None:
    """Core Note [Functions applied past the capture]: never its forward
    inlined with its backward lost."""
    rounded = _RoundStraightThrough.apply

    def fn(w, x):
        return rounded(x @ w).sum()

    with pytest.warns(UserWarning, match="_RoundStraightThrough"):
        checked = check(fn, torch.randn(4, 4, requires_grad=True), torch.randn(2, 4))
    assert checked.compiled.last.eager
