"""Fixtures for the autograd stage's tests."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))  # autograd_helpers (--import-mode=importlib)

from autograd_helpers import pipeline  # noqa: E402


@pytest.fixture(params=["min_cut", "save_eager"])
def partitioner(request: pytest.FixtureRequest) -> str:
    return request.param


@pytest.fixture
def compile_with(partitioner: str) -> Callable[[Any], Any]:
    return pipeline(partitioner)
