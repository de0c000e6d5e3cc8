"""Tensors a program makes inside itself are constants of the graph, with
every constructor eager accepts (core Note [Tensors a program makes]); tensors
it closes over stay graph inputs. Both entry points, both backends."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import conveyor
import pytest
import torch
from conveyor.testing import check
from torch._subclasses.fake_tensor import FakeTensor

sys.path.insert(0, str(Path(__file__).parent))
from zoo_harness import (  # noqa: E402
    ALL_ENTRY_POINTS,
    conveyor_eager,
    conveyor_triton,
    entry_id,
    fresh_dynamo,  # noqa: E402,F401  (autouse)
)

CLOSED = torch.ones(4, dtype=torch.long)


def _legacy(a: torch.Tensor) -> torch.Tensor:
    return torch.LongTensor([294]).to(a.device) - a


def _legacy_float_and_closed_over(a: torch.Tensor) -> torch.Tensor:
    return torch.FloatTensor([[0.5], [2.0]]) * a.float() + CLOSED


def _every_constructor(a: torch.Tensor) -> torch.Tensor:
    made = torch.tensor([1, 2, 3, 4]) + torch.as_tensor([4, 3, 2, 1]) + torch.Tensor([1, 1, 1, 1]).long()
    return made * a + torch.IntTensor([7]).long()


@pytest.mark.parametrize("compile", ALL_ENTRY_POINTS, ids=entry_id)
@pytest.mark.parametrize("fn", [_legacy, _legacy_float_and_closed_over, _every_constructor], ids=lambda f: f.__name__)
def test_tensors_made_inside_are_constants(compile: Any, fn: Any) -> None:
    a = torch.arange(4)
    compiled = compile(fn)
    check(fn, a, compile=lambda f: compiled)
    check(fn, a + 3, compile=lambda f: compiled)
    if compile in (conveyor_eager, conveyor_triton):
        for g in conveyor.last_graphs(compiled):
            constants = [getattr(g.graph, n.target) for n in g.graph.graph.nodes if n.op == "get_attr"]
            assert not any(isinstance(c, FakeTensor) for c in constants), g


def test_a_closed_over_tensor_stays_an_input_beside_a_made_one() -> None:
    compiled = conveyor.compile(_legacy_float_and_closed_over)
    a = torch.arange(4)
    first = compiled(a)
    CLOSED.add_(10)  # seen by the next call: an input, not a constant
    try:
        torch.testing.assert_close(compiled(a), first + 10)
    finally:
        CLOSED.sub_(10)
