import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # for core_helpers (tests use --import-mode=importlib)

import pytest


@pytest.fixture(autouse=True)
def core_only(monkeypatch):
    """The core's tests exercise the core: other installed stages stay out
    unless a test loads entry points itself."""
    monkeypatch.setenv("CONVEYOR_AUTOLOAD", "0")
