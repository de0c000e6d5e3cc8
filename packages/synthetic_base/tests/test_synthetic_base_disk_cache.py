"""The stage's run-time callable survives the persistent compile cache."""

from __future__ import annotations

from pathlib import Path

import conveyor
import torch
from conveyor.testing.round_trip import check_round_trip


def write_both(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a.add_(1)
    b.t_()  # a metadata mutation of a merged input: this stage's own epilogue
    b.mul_(2)
    return a.sum() + b


def test_a_loaded_program_merges_and_restrides_as_the_compiled_one(tmp_path: Path) -> None:
    base = torch.randn(4, 4)
    checked = check_round_trip(write_both, base[:2], base[1:3], folder=tmp_path)
    (after,) = [g.graph for g in conveyor.last_graphs(checked.compiled) if g.stage == "synthetic_base"]
    assert sum(n.op == "placeholder" for n in after.graph.nodes) == 1  # one synthetic base
