"""Compiling one graph with Inductor, and the run-time callable it gives.

Note [Storing Inductor programs]: the disk cache pickles a program's
run-time callable (Note [Picklable run-time callables] in
``conveyor.protocol.artifacts``). What Inductor returns holds a loaded
shared library (C++ on CPU) or Triton launchers, which do not pickle, and
its own serialization (``prepare_for_serialization``) is private and
changes between releases. The callable is stored instead as the call that
makes it: the graph the backend received, a plain-data description of each
input (sizes, strides, storage offset, dtype, device, ``requires_grad``; an
int as its value), the label and the Inductor configuration. Loading makes
a callable that compiles on its first call: fake inputs from the
descriptions, the same retrace and the same ``compile_fx_inner`` call as
the first process, under the configuration Inductor has in that process.
Inductor's own FX graph cache usually serves that compile (the graph, the
inputs and the configuration are Inductor's cache key), so a loaded program
costs a cache lookup and a library load, not a C++ build; and what runs is
always what Inductor makes of this graph now, never a stale binary. A graph
with symbolic sizes is not described (its sizes are symbols of a live
``ShapeEnv``, which a later process cannot have): its callable does not
pickle, and the program is not stored (the disk cache stores no symbolic
program anyway).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import conveyor
import torch
from conveyor import CompiledFn, Request, StageError
from conveyor.stage_api import reducible
from torch._subclasses.fake_tensor import FakeTensorMode

from conveyor_inductor import fx_cache, layouts
from conveyor_inductor.probe import STAGE, api
from conveyor_inductor.specs import TensorSpec, describe_inputs

log = logging.getLogger(__name__)

__all__ = ["InductorProgram", "Made", "TensorSpec", "compile_graph", "describe_inputs", "program"]


@dataclass(frozen=True)
class InductorProgram:
    """What the backend made of one graph, for introspection (the stamp's
    artifact; ``conveyor_inductor.programs(compiled)`` lists them).

    :ivar label: which program (``forward``, ``backward``, ...).
    :ivar source: Inductor's generated code (the Python wrapper, with the C++
        or Triton kernels in it); empty for a program loaded from the disk
        cache before its first call.
    :ivar devices: the device types of its tensor inputs.
    """

    label: str
    source: str
    devices: tuple[str, ...]


@dataclass(frozen=True)
class Made:
    """The backend's result: the run-time callable and its artifact."""

    run: CompiledFn
    info: InductorProgram


def compile_graph(
    graph: torch.fx.GraphModule,
    inputs: Sequence[Any],
    fake_mode: Any,
    label: str,
    config: dict[str, Any],
    expected: tuple[layouts.Strides, ...] | None = None,
) -> tuple[torch.fx.GraphModule, Any]:
    """``graph`` decomposed with Inductor's table (retraced on ``inputs``) and
    compiled by Inductor: the decomposed graph as Inductor left it, and
    Inductor's callable (Note [Symbolic sizes in the inductor backend]). The
    retrace and the compile run where :func:`fx_cache.scope` says, so that
    Inductor's FX graph cache can serve the compile (Note [Inductor's FX graph
    cache])."""
    inductor = api()
    table = {op: fn for op, fn in inductor.decompositions().items() if op is not torch.ops.aten.detach.default}
    source = layouts.with_reshapes(graph)  # Note [Layouts in the inductor backend]
    if expected is None:
        expected = layouts.output_strides(graph)

    def run(*flat: Any) -> tuple[Any, ...]:
        return layouts.restrided(tuple(conveyor.call_graph(source, flat)), expected)

    where = fx_cache.scope(inputs, fake_mode)
    if not where.cached:
        log.debug("%s: Inductor's FX graph cache not used: %s", label, where.why)
    with fx_cache.plain_graph_modules():  # one cache key on both entry points (Note [Inductor's FX graph cache])
        gm = conveyor.retrace(run, where.inputs, where.fake_mode, decomposition_table=table)
    layouts.keep_output_strides(gm)
    with where.entered(), inductor.config.patch({**config, **where.config}):
        compiled = inductor.compile_graph(gm, list(where.inputs), is_backward=label == "backward")
    changed = layouts.changed_output_strides(gm, compiled)
    if changed and where.cached:  # a cache entry written without the mark: compile it afresh
        log.debug("%s: Inductor's cached program changed output strides (%s): compiling again", label, changed)
        with where.entered(), inductor.config.patch({**config, "fx_graph_cache": False}):
            compiled = inductor.compile_graph(gm, list(where.inputs), is_backward=label == "backward")
        changed = layouts.changed_output_strides(gm, compiled)
    if changed:
        raise StageError(
            STAGE,
            f"Inductor returns the {label} graph's outputs in other layouts than the graph's "
            f"({'; '.join(changed)}): this torch does not honour user_visible_output_idxs "
            "(Note [Layouts in the inductor backend])",
        )
    return gm, compiled


def program(
    request: Request,
    gm: torch.fx.GraphModule,
    compiled: Any,
    described: tuple[TensorSpec | int | float | bool, ...] | None,
    config: dict[str, Any],
) -> Made:
    """The run-time callable of a compiled graph, picklable when the inputs
    are ``described`` (Note [Storing Inductor programs])."""
    devices = tuple(sorted({t.device.type for t in request.inputs if isinstance(t, torch.Tensor)}))
    info = InductorProgram(request.label, str(getattr(compiled, "source_code", "") or ""), devices)

    def run(args: list[Any]) -> Sequence[Any]:
        return compiled(args)  # type: ignore[no-any-return]

    if described is None:
        return Made(run, info)  # a closure that does not pickle: the program is not stored
    graph, expected = request.graph, layouts.output_strides(request.graph)
    return Made(
        reducible(run, _loaded, graph, described, request.label, config, request.grad_enabled, expected), info
    )


def _loaded(
    graph: torch.fx.GraphModule,
    described: tuple[TensorSpec | int | float | bool, ...],
    label: str,
    config: dict[str, Any],
    grad_enabled: bool,
    expected: tuple[layouts.Strides, ...] | None = None,
) -> CompiledFn:
    """The callable of a program loaded from the disk cache: compiled with
    Inductor on its first call (Note [Storing Inductor programs]), its
    outputs in the layouts of the first compile's graph (``expected``: the
    stored graph has no fake values; Note [Layouts in the inductor backend])."""
    compiled: list[Any] = []

    def run(args: list[Any]) -> Sequence[Any]:
        if not compiled:
            fake_mode = FakeTensorMode()
            with fake_mode:
                fakes = [d.fake() if isinstance(d, TensorSpec) else d for d in described]
            with torch.set_grad_enabled(grad_enabled):
                compiled.append(compile_graph(graph, fakes, fake_mode, label, config, expected)[1])
        return compiled[0](args)  # type: ignore[no-any-return]

    return reducible(run, _loaded, graph, described, label, config, grad_enabled, expected)
