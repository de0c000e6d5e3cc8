"""The stage's run-time callable (the epilogue) survives the persistent
compile cache."""

from __future__ import annotations

from pathlib import Path

import torch
from conveyor.testing.round_trip import check_round_trip


def mutate_and_view(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    x.add_(y)  # a data mutation the epilogue copies back
    y.unsqueeze_(0)  # a metadata mutation it replays
    return x.view(-1)[1:4], y, x * 2  # an output viewing an input, the input itself, a fresh output


def test_a_loaded_epilogue_replays_mutations_and_aliases(tmp_path: Path) -> None:
    checked = check_round_trip(mutate_and_view, torch.randn(3, 4), torch.randn(3, 4), folder=tmp_path)
    assert checked.compiled is not None
