"""The core's own plugin: runs stages, and contributes the ``eager`` backend
(imported when it first compiles: Note [Stage implementations imported when
they run] in ``conveyor.protocol.lazy``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from conveyor.protocol.hookspecs import hookimpl
from conveyor.protocol.lazy import LazyImpl
from conveyor.protocol.stage import CompiledFn, Lowering, Request, StageSpec


@hookimpl
def conveyor_register_stages(register: Callable[[StageSpec], None]) -> None:
    register(
        StageSpec(
            name="eager",
            kind="backend",
            impl=LazyImpl("conveyor.protocol.backends.eager", "EagerBackend"),
            description="runs the final FX graph with aten (the reference backend)",
            fuses_pointwise=False,  # one call per op: a recomputed op costs a call (Note [Facts of the backend])
        )
    )


@hookimpl(trylast=True)
def conveyor_run_stage(stage: StageSpec, request: Request, options: Mapping[str, Any]) -> Lowering | CompiledFn:
    """Calls the stage with the request as it declared it reads it (Note
    [Declared reads] in ``conveyor.analysis.program``): here, where the
    stage's own code runs, so that the plugins wrapping this hook (timing,
    dumps, invariant checks) see the whole record."""
    seen = request.seen_by(stage)
    if stage.kind == "backend":
        return stage.impl.compile(seen, options)
    return stage.impl.lower(seen, options)
