"""The backend's compiled program survives the persistent compile cache:
its kernels are loaded again from their stored source."""

from __future__ import annotations

from pathlib import Path

import torch
from conveyor.testing.round_trip import check_round_trip
from conveyor_triton import reports


def fused(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = (a * b).relu()
    return y.sum(-1) + a.mean(), y.t()  # a reduction, a pointwise kernel, a view of a kernel's result


def test_a_loaded_program_runs_its_kernels(tmp_path: Path) -> None:
    a, b = torch.randn(8, 16), torch.randn(8, 16)
    checked = check_round_trip(fused, a, b, folder=tmp_path, backend="triton")
    assert any(r.kernels for r in reports(checked.compiled)), "the loaded program runs no kernel"
