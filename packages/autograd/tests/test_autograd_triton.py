"""A backend that records no autograd (Triton, in its interpreter on CPU)
runs both the forward and the backward graph."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is first imported
conveyor_triton_plugin = pytest.importorskip("conveyor_triton.plugin")

import conveyor  # noqa: E402
import torch  # noqa: E402
from autograd_helpers import FULL  # noqa: E402
from conveyor import Plugins  # noqa: E402
from conveyor.testing import check  # noqa: E402


def f(x, w):
    return torch.tanh(x @ w).sigmoid() * 2


@pytest.mark.parametrize("partitioner", ["min_cut", "save_eager"])
def test_triton_runs_forward_and_backward(partitioner: str) -> None:
    plugins = Plugins()
    plugins.load_entry_points(allow=(*FULL, "triton"))
    if "triton" not in plugins.stages():
        plugins.register(conveyor_triton_plugin, name="triton")

    def compile(fn):
        return conveyor.compile(fn, plugins=plugins, backend="triton", stages={"autograd": {"partitioner": partitioner}})

    checked = check(f, torch.randn(8, 4, requires_grad=True), torch.randn(4, 16, requires_grad=True), compile=compile, atol=1e-5, rtol=1e-5)
    stamped = [(g.stage, g.label) for g in conveyor.last_graphs(checked.compiled)]
    assert ("triton", "forward") in stamped and ("triton", "backward") in stamped
