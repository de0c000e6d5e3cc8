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
from typing import Any

import pluggy

from conveyor.errors import PipelineError
from conveyor.protocol import hookspecs
from conveyor.protocol.stage import CompiledFn, Lowering, Request, StageSpec

ENTRY_POINT_GROUP = "conveyor"
log = logging.getLogger("conveyor.plugins")


@dataclass(frozen=True)
class RegisteredStage:
    spec: StageSpec
    plugin: str  # the plugin that registered it
    distribution: str | None  # and its distribution, when it came from an entry point
    version: str | None


class Plugins:
    """The plugin manager of one pipeline."""

    def __init__(self) -> None:
        self._pm = pluggy.PluginManager("conveyor")
        self._pm.add_hookspecs(hookspecs)
        self._dists: dict[str, tuple[str, str]] = {}
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
            except Exception as exc:  # a broken plugin fails loudly at build time
                raise PipelineError(f"plugin {ep.name!r} ({ep.value}) failed to load: {exc!r}") from exc
            self._pm.register(plugin, name=ep.name)
            if ep.dist is not None:
                self._dists[ep.name] = (ep.dist.name, ep.dist.version)
        self._pm.check_pending()

    def stages(self) -> dict[str, RegisteredStage]:
        """Every stage the registered plugins declare, by name."""
        found: dict[str, RegisteredStage] = {}
        for plugin_name, plugin in self._pm.list_name_plugin():
            impl = getattr(plugin, "conveyor_register_stages", None)
            if impl is None:
                continue
            specs: list[StageSpec] = []
            impl(register=specs.append)
            dist, version = self._dists.get(plugin_name, (None, None))
            for spec in specs:
                if not isinstance(spec, StageSpec):
                    raise PipelineError(f"plugin {plugin_name!r} registered {spec!r}, not a StageSpec")
                if spec.name in found:
                    raise PipelineError(
                        f"stage {spec.name!r} is registered twice: by {found[spec.name].plugin!r} "
                        f"and by {plugin_name!r}"
                    )
                found[spec.name] = RegisteredStage(spec, plugin_name, dist, version)
        return found

    def run_stage(
        self, stage: StageSpec, request: Request, options: Mapping[str, Any]
    ) -> Lowering | CompiledFn:
        return self._pm.hook.conveyor_run_stage(stage=stage, request=request, options=dict(options))

    @property
    def manager(self) -> pluggy.PluginManager:
        return self._pm


def _version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"
