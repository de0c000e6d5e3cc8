"""pytest fixtures for stage authors (loaded through the ``pytest11`` entry point)."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from conveyor.protocol.hookspecs import hookimpl
from conveyor.protocol.plugins import Plugins
from conveyor.protocol.stage import StageSpec

_CACHE_DIR_MADE: list[str] = []


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "conveyor_isolated_cache",
        type="bool",
        default=False,
        help="conveyor: run the tests with the persistent compile cache off and in a temporary folder",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Asked for (the ini option ``conveyor_isolated_cache = true``, as
    conveyor's own ``pyproject.toml`` has it), a test run never writes to the
    user's compile cache: unless the environment says otherwise, the
    persistent compile cache is off (``CONVEYOR_CACHE=0``; tests that
    exercise it turn it on) and points at a temporary folder removed after
    the run. Not asked for, the plugin leaves the environment alone: it is
    loaded into every pytest run of a project that installs conveyor."""
    if not config.getini("conveyor_isolated_cache"):
        return
    os.environ.setdefault("CONVEYOR_CACHE", "0")
    if not os.environ.get("CONVEYOR_CACHE_DIR"):
        _CACHE_DIR_MADE.append(tempfile.mkdtemp(prefix="conveyor-test-cache-"))
        os.environ["CONVEYOR_CACHE_DIR"] = _CACHE_DIR_MADE[-1]


def pytest_unconfigure(config: pytest.Config) -> None:
    for folder in _CACHE_DIR_MADE:
        shutil.rmtree(folder, ignore_errors=True)
    _CACHE_DIR_MADE.clear()


@pytest.fixture
def fresh_plugins() -> Plugins:
    """A plugin manager with only the core's builtin plugin (no entry points)."""
    return Plugins()


@pytest.fixture
def installed_plugins() -> Plugins:
    """A plugin manager with every installed entry-point plugin loaded."""
    plugins = Plugins()
    plugins.load_entry_points()
    return plugins


class _StagePlugin:
    def __init__(self, specs: tuple[StageSpec, ...]) -> None:
        self._specs = specs

    @hookimpl
    def conveyor_register_stages(self, register: Callable[[StageSpec], None]) -> None:
        for spec in self._specs:
            register(spec)


@pytest.fixture
def register_stages(installed_plugins: Plugins) -> Iterator[Callable[..., Plugins]]:
    """``register_stages(spec, ...)`` adds stages to ``installed_plugins`` for
    one test and returns that plugin manager; they are gone after the test."""
    names: list[str] = []

    def register(*specs: StageSpec, plugins: Plugins | None = None) -> Plugins:
        target = plugins or installed_plugins
        names.append(target.register(_StagePlugin(specs), name=f"test-stages-{len(names)}"))
        return target

    yield register
    for name in names:
        if installed_plugins.manager.has_plugin(name):
            installed_plugins.unregister(name)


def stage_plugin(*specs: StageSpec) -> Any:
    """A plugin object that registers ``specs`` (for ``Plugins.register``)."""
    return _StagePlugin(specs)
