"""A typed facade over one pluggy plugin manager.

One ``Plugins`` per pipeline, never a module global: tests build their own
and throw them away. Core code calls methods here, not ``pm.hook.*``.
"""

from __future__ import annotations

import importlib.metadata
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import pluggy

from conveyor.errors import PipelineError
from conveyor.protocol import hookspecs
from conveyor.protocol.lazy import LazyImpl
from conveyor.protocol.stage import CompiledFn, Lowering, Request, StageSpec
from conveyor.protocol.tool import ToolSpec

ENTRY_POINT_GROUP = "conveyor"
log = logging.getLogger("conveyor.plugins")
Spec = TypeVar("Spec", StageSpec, ToolSpec)


@dataclass(frozen=True)
class RegisteredStage:
    spec: StageSpec
    plugin: str  # the plugin that registered it
    distribution: str | None  # and its distribution, when it came from an entry point
    version: str | None


@dataclass(frozen=True)
class RegisteredTool:
    """A tool (Note [Tools beside the stages] in ``conveyor.protocol.tool``)
    and where it came from, as :class:`RegisteredStage` for a stage."""

    spec: ToolSpec
    plugin: str
    distribution: str | None
    version: str | None


class Plugins:
    """The plugin manager of one pipeline."""

    def __init__(self) -> None:
        self._pm = pluggy.PluginManager("conveyor")
        self._pm.add_hookspecs(hookspecs)
        self._dists: dict[str, tuple[str, str]] = {}
        self._entry_points: set[str] = set()  # plugins loaded from the entry-point group
        from conveyor.protocol import builtin

        self._pm.register(builtin, name="conveyor.builtin")
        self._dists["conveyor.builtin"] = ("conveyor-core", _version("conveyor-core"))
        if os.environ.get("CONVEYOR_TRACE_PLUGINS"):
            self._pm.trace.root.setwriter(lambda msg: log.warning("%s", msg.rstrip()))
            self._pm.enable_tracing()

    def register(self, plugin: Any, name: str | None = None) -> str:
        """Register a plugin object or module in-process (tests, notebooks)."""
        registered = self._pm.register(plugin, name=name)
        if registered is None:
            raise PipelineError(f"plugin {name or plugin!r} is blocked or already registered")
        self._pm.check_pending()
        return registered

    def unregister(self, name: str) -> None:
        self._pm.unregister(name=name)

    def load_entry_points(
        self, *, allow: tuple[str, ...] | None = None, block: tuple[str, ...] = ()
    ) -> None:
        """Load plugins of the ``conveyor`` entry-point group, honouring the
        allow-list (``None``: all) and the block-list (entry-point names)."""
        for ep in sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
            if ep.name in block or (allow is not None and ep.name not in allow):
                continue
            if self._pm.has_plugin(ep.name):
                continue
            try:
                plugin = ep.load()
                self._pm.register(plugin, name=ep.name)
            except Exception as exc:  # a broken plugin fails loudly at build time
                raise PipelineError(f"plugin {ep.name!r} ({ep.value}{_from(ep)}) failed to load: {exc!r}; {_block_hint(ep.name)}") from exc
            self._entry_points.add(ep.name)
            if ep.dist is not None:
                self._dists[ep.name] = (ep.dist.name, ep.dist.version)
        self._pm.check_pending()

    def stages(self) -> dict[str, RegisteredStage]:
        """Every stage the registered plugins declare, by name."""
        return {
            spec.name: RegisteredStage(spec, plugin, *self._dist_of(plugin))
            for spec, plugin in self._declared("conveyor_register_stages", StageSpec, "stage")
        }

    def tools(self) -> dict[str, RegisteredTool]:
        """Every tool the registered plugins declare, by name (Note [Tools
        beside the stages] in ``conveyor.protocol.tool``)."""
        return {
            spec.name: RegisteredTool(spec, plugin, *self._dist_of(plugin))
            for spec, plugin in self._declared("conveyor_register_tools", ToolSpec, "tool")
        }

    def _declared(self, hook: str, kind: type[Spec], what: str) -> list[tuple[Spec, str]]:
        """What each plugin registers through ``hook``, with the plugin's name;
        a name registered twice is an error naming both plugins."""
        found: dict[str, tuple[Spec, str]] = {}
        for plugin_name, plugin in self._pm.list_name_plugin():
            impl = getattr(plugin, hook, None)
            if impl is None:
                continue
            specs: list[Spec] = []
            try:
                impl(register=specs.append)
            except Exception as exc:  # a broken plugin names itself and how to leave it out
                hint = f"; {_block_hint(plugin_name)}" if plugin_name in self._entry_points else ""
                raise PipelineError(f"plugin {plugin_name!r} failed in {hook}: {exc!r}{hint}") from exc
            for spec in specs:
                if not isinstance(spec, kind):
                    raise PipelineError(f"plugin {plugin_name!r} registered {spec!r}, not a {kind.__name__}")
                _check_impl(spec, plugin_name)
                if spec.name in found:
                    raise PipelineError(
                        f"{what} {spec.name!r} is registered twice: by {found[spec.name][1]!r} and by {plugin_name!r}"
                    )
                found[spec.name] = (spec, plugin_name)
        return list(found.values())

    def _dist_of(self, plugin: str) -> tuple[str | None, str | None]:
        return self._dists.get(plugin, (None, None))

    def run_stage(
        self, stage: StageSpec, request: Request, options: Mapping[str, Any]
    ) -> Lowering | CompiledFn:
        return self._pm.hook.conveyor_run_stage(stage=stage, request=request, options=dict(options))

    @property
    def manager(self) -> pluggy.PluginManager:
        return self._pm


def _check_impl(spec: StageSpec | ToolSpec, plugin: str) -> None:
    """A stage implementation imported when the stage runs is found now,
    unimported (Note [Stage implementations imported when they run] in
    ``conveyor.protocol.lazy``)."""
    impl = getattr(spec, "impl", None)
    if not isinstance(impl, LazyImpl):
        return
    try:
        impl.check()
    except Exception as exc:  # a misspelt module: the build fails, naming the plugin
        raise PipelineError(
            f"plugin {plugin!r}: stage {spec.name!r}'s implementation {impl.module}.{impl.name} "
            f"cannot be found: {exc!r}"
        ) from exc


def _from(ep: importlib.metadata.EntryPoint) -> str:
    return f", from {ep.dist.name} {ep.dist.version}" if ep.dist is not None else ""


def _block_hint(name: str) -> str:
    """How to build pipelines without the entry-point plugin ``name``."""
    return (
        f"to build pipelines without it, set CONVEYOR_BLOCK_PLUGINS={name} "
        f"(or block_plugins = [\"{name}\"] in [tool.conveyor]), or uninstall its distribution"
    )


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
