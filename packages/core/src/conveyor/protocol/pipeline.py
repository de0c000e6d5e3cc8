"""The pipeline driver: chosen stages, run outermost first, backend last.

Compile time is one flat loop over the ordered stages: each stage runs on
every request the stage before it handed on (a wrapper's ``Lowering`` gives
one request, or several: the autograd stage's forward and backward). On the
way back, each wrapper's ``wrap`` builds its run-time callable from the
compiled callables of its requests, innermost stage first, so the first
stage's prologue runs first and its epilogue last at run time. Every graph
is stamped (Note [Stamps] in ``conveyor.protocol.stamps``), and every stage
run timed (Note [Compile timings] in ``conveyor.protocol.timings``).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from conveyor.analysis.saved_hooks import caller_saved_hooks_hidden
from conveyor.errors import ConfigError, ConveyorError, PipelineError, StageError
from conveyor.protocol import ordering, structured_trace, timings
from conveyor.protocol.config import Config
from conveyor.protocol.plugins import Plugins, RegisteredStage, RegisteredTool
from conveyor.protocol.stage import CompiledFn, Lowering, Request, StageSpec
from conveyor.protocol.stamps import StageGraph, collecting, log_graphs

__all__ = ["Pipeline", "StageGraph", "build_plugins"]


def build_plugins(config: Config) -> Plugins:
    plugins = Plugins()
    if config.autoload:
        plugins.load_entry_points(allow=config.plugins, block=config.block_plugins)
    return plugins


class Pipeline:
    """The ordered, enabled stages of one configuration, ready to compile.

    Building it checks everything that can be checked without a program:
    stage names, options, requirements, ordering, the backend, each chosen
    stage's probe (``StageSpec.probe``), and the options of the installed tools (Note [Tools beside the stages] in
    ``conveyor.protocol.tool``).
    """

    def __init__(self, config: Config, plugins: Plugins | None = None, *, default_backend: str = "eager") -> None:
        self.config = config
        self.plugins = plugins if plugins is not None else build_plugins(config)
        self.available: dict[str, RegisteredStage] = self.plugins.stages()
        self.tools: dict[str, RegisteredTool] = self.plugins.tools()
        _check_tools(self.available, self.tools, config)
        specs = {name: r.spec for name, r in self.available.items()}
        staged = dataclasses.replace(config, stages={n: o for n, o in config.stages.items() if n not in self.tools})
        self.stages: tuple[StageSpec, ...] = tuple(ordering.select(specs, staged, default_backend))
        for stage in self.stages:
            _probe(stage)
        self.options: dict[str, dict[str, Any]] = {
            s.name: _options(s.name, s.options, config) for s in self.stages
        }
        #: each installed tool's resolved options (Note [Tools beside the stages] in ``conveyor.protocol.tool``)
        self.tool_options: dict[str, dict[str, Any]] = {
            name: _options(name, t.spec.options, config, what="tool") for name, t in self.tools.items()
        }
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
        and every stamped graph, in the order they were made."""
        # Note [Saved-tensor hooks while tracing]
        with timings.compiling("a program", self.config), caller_saved_hooks_hidden():  # joins the capturer's
            return self._compile_all(request)

    def _compile_all(self, request: Request) -> tuple[CompiledFn, tuple[StageGraph, ...]]:
        captured = StageGraph("capture", request.label, request.graph, seconds=timings.capture_seconds())
        graphs: list[StageGraph] = [captured]
        requests: list[Request] = [self._handed(request)]
        levels: list[list[Lowering]] = []  # per wrapper stage, a lowering per request it ran on
        compiled: list[CompiledFn] = []
        for stage in self.stages:
            if stage.kind == "backend":
                compiled = [self._compile(stage, r, graphs) for r in requests]
                break
            lowerings = [self._lower(stage, r, graphs) for r in requests]
            levels.append(lowerings)
            requests = [self._handed(inner) for lowering in lowerings for inner in lowering.requests]
        for lowerings in reversed(levels):  # back up: each wrap takes its requests' compiled callables
            taken = iter(compiled)
            compiled = [lowering.wrap(*[next(taken) for _ in lowering.requests]) for lowering in lowerings]
        log_graphs(tuple(graphs))
        structured_trace.emit_graphs(graphs)  # Note [Structured trace]: tlparse
        return compiled[0], tuple(graphs)

    def _handed(self, request: Request) -> Request:
        """``request`` as the pipeline hands it to a stage: with its whole
        program record, and the facts of this pipeline's backend (Note
        [Facts of the backend] in ``conveyor.protocol.stage``), whoever made it."""
        fuses = self.backend.fuses_pointwise
        if request.backend_fuses_pointwise != fuses:
            request = request.replace(backend_fuses_pointwise=fuses)
        return request.with_whole_record()

    def _lower(self, stage: StageSpec, request: Request, graphs: list[StageGraph]) -> Lowering:
        """A wrapper stage on one request: its stamps, then each request it hands on."""
        result, seconds = self._run(stage, request, graphs)
        if not isinstance(result, Lowering):
            raise StageError(stage.name, f"lower() returned {type(result).__name__}, not a Lowering")
        graphs += [StageGraph(stage.name, inner.label, inner.graph, seconds=seconds) for inner in result.requests]
        return result

    def _compile(self, stage: StageSpec, request: Request, graphs: list[StageGraph]) -> CompiledFn:
        """The backend on one request: its stamps, among them the graph it
        lowered (the graph it received, when it stamps none)."""
        mark = len(graphs)
        result, seconds = self._run(stage, request, graphs)
        if isinstance(result, Lowering) or not callable(result):
            raise StageError(stage.name, f"backend returned {type(result).__name__}, not a callable")
        if not any(not g.step for g in graphs[mark:]):
            graphs.append(StageGraph(stage.name, request.label, request.graph, seconds=seconds))
        return result

    def _run(self, stage: StageSpec, request: Request, graphs: list[StageGraph]) -> tuple[Lowering | CompiledFn, float]:
        """One stage on one request, through the ``conveyor_run_stage`` hook
        (plugins wrap it: timing, dumps), and its seconds; what the stage
        stamps goes to ``graphs``, its own entries with those seconds."""
        with timings.stage_run(stage.name, request.label) as took, collecting(stage.name, request.label) as stamps:
            try:
                result = self.plugins.run_stage(stage, request, self.options[stage.name])
            except ConveyorError:
                raise
            except Exception as exc:
                raise StageError(stage.name, f"{type(exc).__name__}: {exc}") from exc
        graphs += [g if g.step else dataclasses.replace(g, seconds=took[0]) for g in stamps]
        return result, took[0]


def _probe(stage: StageSpec) -> None:
    """Run the stage's declared probe (``StageSpec.probe``): a refusal is a
    ``StageError`` naming the stage, raised while the pipeline is built."""
    if stage.probe is None:
        return
    try:
        stage.probe()
    except StageError:
        raise
    except Exception as exc:
        raise StageError(stage.name, f"cannot work here: {type(exc).__name__}: {exc}") from exc


def _check_tools(
    stages: Mapping[str, RegisteredStage], tools: Mapping[str, RegisteredTool], config: Config
) -> None:
    """A tool is named like no stage, config enables or disables no tool,
    and every option table names a stage or a tool."""
    clash = sorted(set(stages) & set(tools))
    if clash:
        name = clash[0]
        raise PipelineError(
            f"{name!r} is registered as a stage by {stages[name].plugin!r} and as a tool by {tools[name].plugin!r}"
        )
    for key in ("enable", "disable"):
        named = sorted(set(getattr(config, key)) & set(tools))
        if named:
            tool = tools[named[0]].spec
            raise ConfigError(
                f"config {key!r}{config.source_of(key)}: {tool.name!r} is a tool, not a stage of the pipeline; it is used as "
                f"`{tool.usage}` (its options: [tool.conveyor.stages.{tool.name}])"
            )
    unknown = sorted(set(config.stages) - set(stages) - set(tools))
    if unknown:
        raise ConfigError(
            f"config 'stages'{config.source_of('stages')}: options for unknown stage(s) {unknown}; "
            f"installed stages are {sorted(stages)}"
            + (f" and tools {sorted(tools)}" if tools else "")
        )


def _options(name: str, declared: Mapping[str, Any], config: Config, what: str = "stage") -> dict[str, Any]:
    """The options of the stage or tool ``name``: its declared defaults
    overlaid by config; a name it does not declare is an error."""
    given: Mapping[str, Any] = config.options_for(name)
    unknown = sorted(set(given) - set(declared))
    if unknown:
        raise ConfigError(f"{what} {name!r}: unknown option(s) {unknown}; valid options are {sorted(declared)}")
    return {**declared, **given}
