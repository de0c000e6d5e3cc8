"""The compiled-autograd section of ``conveyor demo``."""

from __future__ import annotations

import pytest
import torch
from conveyor.cli import main as conveyor_main
from conveyor.demo import DemoModel
from conveyor_compiled_autograd.demo import run


def test_demo_section_matches_eager(capsys: pytest.CaptureFixture[str]) -> None:
    torch.manual_seed(0)
    data = torch.randn(4, 6, 32)
    target = torch.randint(0, 5, (4,))
    assert run(DemoModel(), data, target, steps=2, backend=None) == 0
    out = capsys.readouterr().out
    assert "1 conveyor backward graph(s) inlined" in out and "opaque: nothing" in out


@pytest.mark.slow
def test_conveyor_demo_shows_the_section(capsys: pytest.CaptureFixture[str]) -> None:
    assert conveyor_main(["demo", "--steps", "2"]) == 0
    assert "compiled autograd" in capsys.readouterr().out
