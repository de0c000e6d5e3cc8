"""Pipelines for the dedupe tests: dedupe alone, or with every installed stage."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import conveyor
import conveyor_dedupe.plugin
import pytest
from conveyor import Plugins


@pytest.fixture
def dedupe_only(fresh_plugins: Plugins) -> Callable[[Any], conveyor.Compiled]:
    """Compile with the dedupe stage and the eager backend only."""
    fresh_plugins.register(conveyor_dedupe.plugin, name="dedupe")
    return lambda f: conveyor.compile(f, plugins=fresh_plugins, backend="eager")


@pytest.fixture
def full_pipeline() -> Callable[[Any], conveyor.Compiled]:
    """Compile with the full pipeline's installed stages (functionalize,
    autograd...) and the eager backend; other plugins are not loaded."""
    plugins = Plugins()
    plugins.load_entry_points(allow=("dedupe", "synthetic_base", "functionalize", "autograd"))
    return lambda f: conveyor.compile(f, plugins=plugins, backend="eager")


@pytest.fixture(params=["dedupe_only", "full_pipeline"])
def pipeline(request: pytest.FixtureRequest) -> Callable[[Any], conveyor.Compiled]:
    return request.getfixturevalue(request.param)
