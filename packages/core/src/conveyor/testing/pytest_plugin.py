"""pytest fixtures for stage authors (loaded through the ``pytest11`` entry point)."""

from __future__ import annotations

import glob
import os
import shutil
import tempfile
import tomllib
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from conveyor.protocol.config import resolve
from conveyor.protocol.hookspecs import hookimpl
from conveyor.protocol.pipeline import Pipeline
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
    parser.addini(
        "conveyor_plugin_projects",
        type="linelist",
        default=[],
        help="conveyor: globs (from the rootdir) of the pyproject.toml files whose [project.entry-points.conveyor] "
        "are the only conveyor plugins the tests load (CONVEYOR_PLUGINS is set to them)",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Asked for (the ini option ``conveyor_isolated_cache = true``, as
    conveyor's own ``pyproject.toml`` has it), a test run never writes to the
    user's compile cache: unless the environment says otherwise, the
    persistent compile cache is off (``CONVEYOR_CACHE=0``; tests that
    exercise it turn it on) and points at a temporary folder removed after
    the run. Not asked for, the plugin leaves the environment alone: it is
    loaded into every pytest run of a project that installs conveyor."""
    _isolate_plugins(config)
    if not config.getini("conveyor_isolated_cache"):
        return
    os.environ.setdefault("CONVEYOR_CACHE", "0")
    if not os.environ.get("CONVEYOR_CACHE_DIR"):
        _CACHE_DIR_MADE.append(tempfile.mkdtemp(prefix="conveyor-test-cache-"))
        os.environ["CONVEYOR_CACHE_DIR"] = _CACHE_DIR_MADE[-1]


def project_plugins(rootdir: Path, patterns: list[str]) -> tuple[str, ...]:
    """The entry-point names in the ``conveyor`` group of the pyproject.toml
    files ``patterns`` match under ``rootdir``, sorted."""
    names: set[str] = set()
    for pattern in patterns:
        for found in sorted(glob.glob(str(rootdir / pattern))):
            with open(found, "rb") as f:
                project = tomllib.load(f).get("project", {})
            names.update(project.get("entry-points", {}).get("conveyor", {}))
    return tuple(sorted(names))


def _isolate_plugins(config: pytest.Config) -> None:
    """Note [Tests isolated from installed plugins]: a project's tests build
    their pipelines from the project's own plugins. Asked for (the ini option
    ``conveyor_plugin_projects``, globs of the project's pyproject.toml files,
    as conveyor's own ``pyproject.toml`` has ``packages/*/pyproject.toml``),
    the allow-list ``CONVEYOR_PLUGINS`` is set to the entry points those files
    declare, so another conveyor plugin installed in the environment, working
    or broken, is never loaded by ``conveyor.compile``, ``torch.compile(...,
    backend="conveyor")``, the CLI (subprocesses inherit it) or the
    ``installed_plugins`` fixture. An environment that sets
    ``CONVEYOR_PLUGINS`` itself is left alone, as for the cache."""
    patterns = config.getini("conveyor_plugin_projects")
    if not patterns or "CONVEYOR_PLUGINS" in os.environ:
        return
    names = project_plugins(Path(config.rootpath), patterns)
    if not names:
        raise pytest.UsageError(f"conveyor_plugin_projects {patterns}: no [project.entry-points.conveyor] found")
    os.environ["CONVEYOR_PLUGINS"] = ",".join(names)
    _PLUGINS_SET.append(names)


_PLUGINS_SET: list[tuple[str, ...]] = []


def pytest_report_header(config: pytest.Config) -> str | None:
    if _PLUGINS_SET:
        return f"conveyor: plugins limited to the project's: CONVEYOR_PLUGINS={','.join(_PLUGINS_SET[-1])}"
    return None


def pytest_unconfigure(config: pytest.Config) -> None:
    if _PLUGINS_SET and os.environ.get("CONVEYOR_PLUGINS") == ",".join(_PLUGINS_SET[-1]):
        del os.environ["CONVEYOR_PLUGINS"]
    _PLUGINS_SET.clear()
    for folder in _CACHE_DIR_MADE:
        shutil.rmtree(folder, ignore_errors=True)
    _CACHE_DIR_MADE.clear()


@pytest.fixture
def fresh_plugins() -> Plugins:
    """A plugin manager with only the core's builtin plugin (no entry points)."""
    return Plugins()


@pytest.fixture
def installed_plugins() -> Plugins:
    """A plugin manager with every installed entry-point plugin loaded that
    ``CONVEYOR_PLUGINS`` / ``CONVEYOR_BLOCK_PLUGINS`` allow (Note [Tests
    isolated from installed plugins])."""
    from conveyor.protocol.config import resolve

    config = resolve()
    plugins = Plugins()
    plugins.load_entry_points(allow=config.plugins, block=config.block_plugins)
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


def pipeline_of(*specs: StageSpec, plugins: Sequence[Any] = (), **config: Any) -> Pipeline:
    """A pipeline of ``specs`` and ``plugins`` alone (no installed plugin is
    loaded), built from the configuration ``config``."""
    manager = Plugins()
    manager.register(_StagePlugin(specs), name="stages")
    for k, plugin in enumerate(plugins):
        manager.register(plugin, name=f"plugin-{k}")
    return Pipeline(resolve({"autoload": False, **config}), manager)
