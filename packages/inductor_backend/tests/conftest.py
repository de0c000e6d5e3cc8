"""What the FX-graph-cache tests share (``test_inductor_fx_cache``,
``test_inductor_loaded_programs``): the fixture below, and
``fx_cache_helpers`` (importable from here, --import-mode=importlib)."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
import torch._inductor.config as inductor_config
from torch._dynamo.utils import counters
from torch._inductor.utils import fresh_cache

sys.path.insert(0, str(Path(__file__).parent))  # fx_cache_helpers


@pytest.fixture
def empty_fx_graph_cache() -> Iterator[None]:
    """An empty Inductor cache folder of its own, the FX graph cache on, and
    dynamo's state reset: a frame an earlier test compiled with other sizes
    would be compiled with symbolic ones (automatic dynamic shapes), a graph
    other than the one the test looks up. A test module uses it for every
    test with ``pytestmark = pytest.mark.usefixtures("empty_fx_graph_cache")``."""
    torch._dynamo.reset()
    with fresh_cache(), inductor_config.patch(fx_graph_cache=True):
        counters.clear()
        yield
