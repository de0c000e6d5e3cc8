"""Ops torch marks as effectful (Note [Effectful ops] in functional_run.py)."""

from __future__ import annotations

import conveyor
import conveyor_functionalize.plugin
import pytest
import torch
from conveyor.testing import check


def compile_eager(fn):
    plugins = conveyor.Plugins()
    plugins.register(conveyor_functionalize.plugin, name="functionalize")
    return conveyor.compile(fn, plugins=plugins, backend="eager")


def _spd(n: int) -> torch.Tensor:
    a = torch.randn(n, n, generator=torch.Generator().manual_seed(0))
    return a @ a.T + n * torch.eye(n)


@pytest.mark.parametrize(
    "fn",
    [torch.linalg.inv, torch.linalg.cholesky, lambda a: torch.linalg.solve(a, a[:, :1] + 1), torch.linalg.lu_factor],
    ids=["inv", "cholesky", "solve", "lu_factor"],
)
@pytest.mark.parametrize("requires_grad", [False, True])
def test_linalg_ops_with_error_checks(fn, requires_grad: bool) -> None:
    check(fn, _spd(4).requires_grad_(requires_grad), compile=compile_eager)


def test_the_error_check_survives_and_raises_as_in_eager() -> None:
    compiled = compile_eager(torch.linalg.inv)
    with pytest.raises(torch.linalg.LinAlgError, match="could not be completed"):
        compiled(torch.zeros(3, 3))
    (graph,) = [g.graph for g in conveyor.last_graphs(compiled) if g.stage == "functionalize"]
    assert any(n.target is torch.ops.aten._linalg_check_errors.default for n in graph.graph.nodes)
