"""Note [Higher-order ops in the inductor backend]: a graph holding
``torch.cond`` or ``map`` runs as it is, with a warning; before, Inductor's
lowering failed on the branches conveyor traced (h_sweep4 B11)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import conveyor
import pytest
import torch
from conveyor.testing import check

ENTRIES: dict[str, Callable[[Callable[..., Any]], Any]] = {
    "conveyor": lambda f: conveyor.compile(f, backend="inductor"),
    "dynamo": lambda f: torch.compile(f, backend="conveyor", options={"backend": "inductor"}),
}


def _cond_two_outputs(x: torch.Tensor, y: torch.Tensor) -> Any:
    return torch.cond(x.sum() > 0, lambda a, b: (a * b, a + 1), lambda a, b: (a - b, b * 2), (x, y))


def _map(x: torch.Tensor, y: torch.Tensor) -> Any:
    from torch._higher_order_ops.map import map as hop_map

    return hop_map(lambda a, b: a * b + 1, x, y)


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize(
    "fn,shapes", [(_cond_two_outputs, [(3,), (3,)]), (_map, [(4, 3), (3,)])], ids=["cond", "map"]
)
def test_a_graph_with_a_higher_order_op_runs_as_it_is(entry: str, fn: Callable[..., Any], shapes: list[Any]) -> None:
    torch._dynamo.reset()
    with pytest.warns(UserWarning, match="higher-order op"):
        check(fn, *(torch.randn(s) for s in shapes), compile=ENTRIES[entry])
