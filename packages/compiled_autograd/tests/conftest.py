"""Fixtures for the compiled-autograd tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))  # ca_helpers (--import-mode=importlib)


@pytest.fixture(autouse=True)
def no_ca_leak() -> Iterator[None]:
    """The test leaves torch's compiled autograd as it found it."""
    from torch._dynamo import compiled_autograd as ca

    before = ca.compiled_autograd_enabled
    yield
    assert ca.compiled_autograd_enabled == before
    prior = torch._C._dynamo.compiled_autograd.set_autograd_compiler(None, False)
    torch._C._dynamo.compiled_autograd.set_autograd_compiler(*prior)
    assert prior[0] is None, "a compiled-autograd compiler is still installed"
