"""Fixtures for the triton backend tests.

Triton's interpreter must be on before triton is first imported (there is no
GPU here), so it is switched on first of all.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path.insert(0, str(Path(__file__).parent))  # the shared OpInfo sweep module

from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import conveyor  # noqa: E402
import conveyor_triton.plugin  # noqa: E402
import pytest  # noqa: E402
from conveyor import Plugins  # noqa: E402


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "opinfo: the OpInfo sweep (bounded; deselect with -m 'not opinfo')")


@pytest.fixture(autouse=True)
def _kernel_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """One kernel cache directory for the session, never the user's."""
    monkeypatch.setenv("CONVEYOR_TRITON_CACHE", str(tmp_path_factory.getbasetemp() / "kernels"))


@pytest.fixture
def triton_only(fresh_plugins: Plugins) -> Callable[..., Callable[[Any], conveyor.Compiled]]:
    """``triton_only(**options)``: compile with the triton backend alone, outputs poisoned."""
    fresh_plugins.register(conveyor_triton.plugin, name="triton")

    def make(**options: Any) -> Callable[[Any], conveyor.Compiled]:
        opts = {"poison": True, **options}
        return lambda f: conveyor.compile(f, plugins=fresh_plugins, backend="triton", stages={"triton": opts})

    return make


@pytest.fixture
def full_pipeline(installed_plugins: Plugins) -> Callable[[Any], conveyor.Compiled]:
    """Compile with every installed stage and the triton backend."""
    return lambda f: conveyor.compile(f, plugins=installed_plugins, backend="triton", stages={"triton": {"poison": True}})
