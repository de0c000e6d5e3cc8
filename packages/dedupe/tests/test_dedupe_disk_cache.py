"""The stage's run-time callable survives the persistent compile cache."""

from __future__ import annotations

from pathlib import Path

import conveyor
import torch
from conveyor.testing.round_trip import check_round_trip


def twice(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a.mul_(2)
    return a + b


def test_a_loaded_program_dedupes_as_the_compiled_one(tmp_path: Path) -> None:
    x = torch.randn(5)
    checked = check_round_trip(twice, x, x, folder=tmp_path)
    (after,) = [g.graph for g in conveyor.last_graphs(checked.compiled) if g.stage == "dedupe"]
    assert sum(n.op == "placeholder" for n in after.graph.nodes) == 1  # the loaded program took x once
