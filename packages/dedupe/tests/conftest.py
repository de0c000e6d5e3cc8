"""Pipelines for the dedupe tests: dedupe alone, or with every installed stage."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import conveyor
import conveyor_dedupe.plugin
from conveyor import Plugins


@pytest.fixture
def dedupe_only(fresh_plugins: Plugins) -> Callable[[Any], conveyor.Compiled]:
    """Compile with the dedupe stage and the eager backend only."""
    fresh_plugins.register(conveyor_dedupe.plugin, name="dedupe")
    return lambda f: conveyor.compile(f, plugins=fresh_plugins, backend="eager")


@pytest.fixture
def full_pipeline(installed_plugins: Plugins) -> Callable[[Any], conveyor.Compiled]:
    """Compile with every installed stage and the eager backend."""
    return lambda f: conveyor.compile(f, plugins=installed_plugins, backend="eager")
