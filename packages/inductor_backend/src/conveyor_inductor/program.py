"""The run-time callable of one compiled graph, and how it is stored.

Note [Storing Inductor programs]: the disk cache pickles a program's
run-time callable (Note [Picklable run-time callables] in
``conveyor.protocol.artifacts``). What Inductor returns holds a loaded
shared library (C++ on CPU) or Triton launchers, which do not pickle, and
its own serialization (``prepare_for_serialization``) is private and
changes between releases. The callable is stored instead as the call that
makes it: the graph the backend handed Inductor (after the decompositions:
:func:`conveyor_inductor.lowering.decompose`), a plain-data description of
each input (sizes, strides, storage offset, dtype, device,
``requires_grad``; an int as its value), the label and the Inductor
configuration. Loading makes a callable that compiles on its first call:
fake inputs from the descriptions, each node's fake value propagated from
them (:func:`propagate`: one fake op per node, where the decomposing retrace
costs three to four times as much), and the same ``compile_fx_inner`` call
as the first process, under the configuration Inductor has in that process.
Inductor's own FX graph cache usually serves that compile, so a loaded
program costs a cache lookup and a library load, not a C++ build; and what
runs is always what Inductor makes of this graph now, never a stale binary.

Both processes hand Inductor the same graph module: :func:`for_inductor`
copies the decomposed graph into a fresh plain ``GraphModule``, whether the
graph came from the retrace (whose graph records its tracer class, pickled
into Inductor's key) or from the disk cache (no tracer, node metadata kept
only where it is plain data), so that Inductor's key, which hashes the
module's pickled ``__dict__`` and code (Note [Inductor's FX graph cache]),
is the same; the copy also keeps the stored graph as the retrace made it
when Inductor rewrites the one it compiles.

A graph with symbolic sizes is not described (its sizes are symbols of a
live ``ShapeEnv``, which a later process cannot have): its callable does not
pickle, and the program is not stored (the disk cache stores no symbolic
program anyway).
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from conveyor import CompiledFn, Request
from conveyor.stage_api import reducible

from conveyor_inductor import fx_cache, layouts, lowering
from conveyor_inductor.specs import TensorSpec, describe_inputs

__all__ = ["InductorProgram", "Made", "TensorSpec", "describe_inputs", "for_inductor", "program", "propagate"]


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


def for_inductor(decomposed: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A plain ``GraphModule`` over a copy of ``decomposed``'s graph (node
    names, metadata and attributes shared with it): what Inductor is handed,
    the same whichever process made ``decomposed`` (Note [Storing Inductor
    programs])."""
    graph = torch.fx.Graph()
    graph._codegen = decomposed.graph._codegen
    output, _ = layouts.outputs(decomposed)
    copied = graph.output(graph.graph_copy(decomposed.graph, {}), type_expr=output.type)
    copied.meta.update(output.meta)  # user_visible_output_idxs
    with fx_cache.plain_graph_modules():
        return torch.fx.GraphModule(decomposed, graph, "GraphModule")


def program(
    request: Request,
    decomposed: torch.fx.GraphModule,
    compiled_gm: torch.fx.GraphModule,
    compiled: Any,
    described: tuple[TensorSpec | int | float | bool, ...] | None,
    config: dict[str, Any],
) -> Made:
    """The run-time callable of ``compiled`` (Inductor's, from ``compiled_gm``,
    made by :func:`for_inductor` of ``decomposed``), picklable when the
    inputs are ``described`` (Note [Storing Inductor programs])."""
    devices = tuple(sorted({t.device.type for t in request.inputs if isinstance(t, torch.Tensor)}))
    info = InductorProgram(request.label, str(getattr(compiled, "source_code", "") or ""), devices)

    def run(args: list[Any]) -> Sequence[Any]:
        return compiled(args)  # type: ignore[no-any-return]

    if described is None:
        return Made(run, info)  # a closure that does not pickle: the program is not stored
    return Made(reducible(run, _loaded, decomposed, described, request.label, config, request.grad_enabled), info)


def propagate(gm: torch.fx.GraphModule, where: fx_cache.Scope) -> None:
    """Set each node's ``meta["val"]``: its value run on ``where``'s fake
    inputs, in ``where``'s fake mode (a graph loaded from the disk cache has
    none; Note [Storing Inductor programs])."""
    values: dict[torch.fx.Node, Any] = {}
    attrs: dict[str, Any] = {}
    inputs = iter(where.inputs)
    with where.fake_mode:
        for node in gm.graph.nodes:
            if node.op == "placeholder":
                value = next(inputs)
            elif node.op == "get_attr":
                value = attrs.get(node.target)
                if value is None:
                    value = operator.attrgetter(str(node.target))(gm)
                    if isinstance(value, torch.Tensor):
                        value = where.fake_mode.from_tensor(value, static_shapes=True)
                    attrs[str(node.target)] = value
            elif node.op == "call_function":
                args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), values.__getitem__)
                value = node.target(*args, **kwargs)  # type: ignore[operator]
            else:
                continue
            values[node] = node.meta["val"] = value


def _loaded(
    decomposed: torch.fx.GraphModule,
    described: tuple[TensorSpec | int | float | bool, ...],
    label: str,
    config: dict[str, Any],
    grad_enabled: bool,
) -> CompiledFn:
    """The callable of a program loaded from the disk cache: the stored
    decomposed graph compiled with Inductor on its first call (Note [Storing
    Inductor programs])."""
    compiled: list[Any] = []

    def run(args: list[Any]) -> Sequence[Any]:
        if not compiled:
            where = fx_cache.described_scope(described)
            gm = for_inductor(decomposed)
            with torch.set_grad_enabled(grad_enabled):
                propagate(gm, where)
                compiled.append(lowering.compile_decomposed(gm, where, label, config))
        return compiled[0](args)  # type: ignore[no-any-return]

    return reducible(run, _loaded, decomposed, described, label, config, grad_enabled)
