"""The pipeline driver: chosen stages, run outermost first, backend last.

Compile time is one walk down the ordered stages; a wrapper stage's
``Lowering`` hands one request (or several, e.g. forward and backward) to the
next stage, and its ``wrap`` builds the run-time callable from the next
stage's compiled callable(s) on the way back up. So the first stage's
prologue runs first and its epilogue last at run time.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch.fx

from conveyor import ordering
from conveyor.config import Config
from conveyor.errors import ConfigError, ConveyorError, StageError
from conveyor.plugins import Plugins, RegisteredStage
from conveyor.stage import CompiledFn, Lowering, Request, StageSpec

log = logging.getLogger("conveyor.graphs")


@dataclass(frozen=True)
class StageGraph:
    """The graph one stage produced, stamped with the stage and the program."""

    stage: str
    label: str
    graph: torch.fx.GraphModule

    def __str__(self) -> str:
        return f"# after {self.stage} ({self.label})\n{self.graph.code.strip()}\n"


def build_plugins(config: Config) -> Plugins:
    plugins = Plugins()
    if config.autoload:
        plugins.load_entry_points(allow=config.plugins, block=config.block_plugins)
    return plugins


class Pipeline:
    """The ordered, enabled stages of one configuration, ready to compile.

    Building it checks everything that can be checked without a program:
    stage names, options, requirements, ordering, the backend.
    """

    def __init__(self, config: Config, plugins: Plugins | None = None, *, default_backend: str = "eager") -> None:
        self.config = config
        self.plugins = plugins if plugins is not None else build_plugins(config)
        self.available: dict[str, RegisteredStage] = self.plugins.stages()
        specs = {name: r.spec for name, r in self.available.items()}
        self.stages: tuple[StageSpec, ...] = tuple(ordering.select(specs, config, default_backend))
        self.options: dict[str, dict[str, Any]] = {s.name: _options(s, config) for s in self.stages}
        self._for_devices: dict[frozenset[str], Pipeline] = {}

    @property
    def backend(self) -> StageSpec:
        return self.stages[-1]

    def with_backend(self, backend: str) -> Pipeline:
        """The same configuration with another default backend."""
        return Pipeline(self.config, self.plugins, default_backend=backend)

    def for_devices(self, devices: frozenset[str]) -> Pipeline:
        """The pipeline for inputs on ``devices`` (device types): this one,
        unless the configuration names no backend and an installed backend
        declares itself the default for one of them (``StageSpec.default_for``;
        the first by name when several do)."""
        if self.config.backend is not None:
            return self
        found = self._for_devices.get(devices)
        if found is None:
            backends = sorted(
                name
                for name, r in self.available.items()
                if r.spec.kind == "backend" and devices & set(r.spec.default_for)
            )
            found = self if not backends or backends[0] == self.backend.name else self.with_backend(backends[0])
            self._for_devices[devices] = found
        return found

    def compile(self, request: Request) -> tuple[CompiledFn, tuple[StageGraph, ...]]:
        """Run every stage's compile-time half; return the run-time callable
        and the graph after each stage."""
        graphs: list[StageGraph] = [StageGraph("capture", request.label, request.graph)]
        compiled = self._compile_from(0, request, graphs)
        if os.environ.get("CONVEYOR_LOG_GRAPHS"):
            for g in graphs:
                print(g, file=sys.stderr)
        return compiled, tuple(graphs)

    def _compile_from(self, index: int, request: Request, graphs: list[StageGraph]) -> CompiledFn:
        stage = self.stages[index]
        try:
            result = self.plugins.run_stage(stage, request, self.options[stage.name])
        except ConveyorError:
            raise
        except Exception as exc:
            raise StageError(stage.name, f"{type(exc).__name__}: {exc}") from exc
        if stage.kind == "backend":
            if not callable(result):
                raise StageError(stage.name, f"backend returned {type(result).__name__}, not a callable")
            graphs.append(StageGraph(stage.name, request.label, request.graph))
            return result
        if not isinstance(result, Lowering):
            raise StageError(stage.name, f"lower() returned {type(result).__name__}, not a Lowering")
        for inner in result.requests:
            graphs.append(StageGraph(stage.name, inner.label, inner.graph))
        compiled = [self._compile_from(index + 1, inner, graphs) for inner in result.requests]
        return result.wrap(*compiled)


def _options(stage: StageSpec, config: Config) -> dict[str, Any]:
    given: Mapping[str, Any] = config.options_for(stage.name)
    unknown = sorted(set(given) - set(stage.options))
    if unknown:
        raise ConfigError(
            f"stage {stage.name!r}: unknown option(s) {unknown}; valid options are {sorted(stage.options)}"
        )
    return {**stage.options, **given}
