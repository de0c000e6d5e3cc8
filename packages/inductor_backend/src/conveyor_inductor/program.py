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
configuration, and the sizes and strides of its outputs. Loading makes a
callable that compiles on its first call: fake inputs from the
descriptions, and the same ``compile_fx_inner`` call as the first process,
under the configuration Inductor has in that process (Note [Fake values
Inductor makes itself]: no fake value is propagated over the graph).
Inductor's own FX graph cache usually serves that compile, so a loaded
program costs a cache lookup and a library load, not a C++ build; and what
runs is always what Inductor makes of this graph now, never a stale binary.
The lookup is by the key the first process's compile used, stored with the
program, where nothing else Inductor's key covers has changed since (Note
[Inductor's entry by its stored key] in ``fx_entry.py``); otherwise the
compile computes it.

Both processes hand Inductor the same graph module: :func:`for_inductor`
copies the decomposed graph into a fresh plain ``GraphModule``, whether the
graph came from the retrace (whose graph records its tracer class, pickled
into Inductor's key) or from the disk cache (no tracer, node metadata kept
only where it is plain data), so that Inductor's key, which hashes the
module's pickled ``__dict__`` and code (Note [Inductor's FX graph cache]),
is the same; the copy also keeps the stored graph as the retrace made it
when Inductor rewrites the one it compiles.

Note [Fake values Inductor makes itself]: a loaded graph has no
``meta["val"]`` (the disk cache keeps plain data only), and it is handed to
``compile_fx_inner`` without any on its operations: a hit in Inductor's FX
graph cache never reads one (the key hashes the module's code and the fake
inputs; the stored program is loaded by it), and a miss propagates its own
over the whole graph (``fake_tensor_prop`` in ``codegen_and_compile``, under
``no_grad``, before anything reads them), replacing any it finds. What the
backend itself reads from them, the outputs' layouts it checks Inductor's
result against (Note [Layouts in the inductor backend]), is stored with the
program. Only the placeholders get theirs, the fake inputs, for what
Inductor reads of the inputs before that propagation (their devices). A
propagation over a training step's forward and backward graphs cost about
0.15 s of a warm first call, and its fake values about 5k objects the
garbage collector scanned (the test of a loaded program compiled on a miss
is ``test_a_loaded_program_compiles_on_an_inductor_miss``).

Note [A loaded graph handed over]: a loaded program keeps its decomposed
graph only to compile it on its first call (and to be pickled again before
that). So that graph itself is handed to Inductor, in a plain
``GraphModule`` as :func:`for_inductor` makes (the same code and attributes:
the same key), not a copy of it: a copy of a training step's two graphs was
some 1,200 nodes and 8,600 objects made in the first call (nearly a full
collection of the garbage collector's budget), and the graph is not kept
after the compile. What Inductor may rewrite in place on a miss is then
nothing anyone reads again: the program no longer pickles once its graph is
handed over (the disk cache, which never stores a loaded program anyway,
would store nothing, and says so in its debug log); a compile that fails
is not tried again: the next call says the first one failed.

A graph with symbolic sizes is not described (its sizes are symbols of a
live ``ShapeEnv``, which a later process cannot have): its callable does not
pickle, and the program is not stored (the disk cache stores no symbolic
program anyway).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from conveyor import CompiledFn, Request, StageError
from conveyor.stage_api import Deferred, reducible

from conveyor_inductor import fx_cache, fx_entry, layouts, lowering
from conveyor_inductor.probe import STAGE
from conveyor_inductor.specs import TensorSpec, describe_inputs

__all__ = ["InductorProgram", "Made", "TensorSpec", "describe_inputs", "for_inductor", "program"]


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


def _handed(decomposed: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """What :func:`for_inductor` makes of a loaded program's ``decomposed``
    graph, over that graph itself (Note [A loaded graph handed over])."""
    with fx_cache.plain_graph_modules():
        return torch.fx.GraphModule(decomposed, decomposed.graph, "GraphModule")


class _Stored:
    """A loaded program's decomposed graph, until it is handed to Inductor
    (Note [A loaded graph handed over]); pickles as the graph, stored apart
    and unpickled only when the program compiles it (Note [Values loaded on
    demand] in ``conveyor.protocol.artifacts``): a program served by its
    stored key (Note [Inductor's entry by its stored key]) reads only the
    graph's frozen parameters, of which a graph compiled without Inductor's
    freezing has none."""

    __slots__ = ("graph",)

    def __init__(self, graph: Deferred[torch.fx.GraphModule]) -> None:
        self.graph: Deferred[torch.fx.GraphModule] | None = graph

    def take(self) -> torch.fx.GraphModule:
        graph, self.graph = self.graph, None
        if graph is None:
            raise StageError(STAGE, "a program loaded from the disk cache failed to compile on its first call (above)")
        return graph.get()

    def __reduce__(self) -> tuple[Any, ...]:
        if self.graph is None:  # the disk cache logs it and stores nothing
            raise TypeError("a loaded Inductor program after its first call (its graph was handed to Inductor)")
        return (_Stored, (self.graph,))


def program(
    request: Request,
    decomposed: torch.fx.GraphModule,
    compiled_gm: torch.fx.GraphModule,
    compiled: Any,
    described: tuple[TensorSpec | int | float | bool, ...] | None,
    config: dict[str, Any],
    entry: fx_entry.EntryKey | None = None,
) -> Made:
    """The run-time callable of ``compiled`` (Inductor's, from ``compiled_gm``,
    made by :func:`for_inductor` of ``decomposed``), picklable when the
    inputs are ``described`` (Note [Storing Inductor programs]), with the
    ``entry`` Inductor keeps it under (Note [Inductor's entry by its stored
    key])."""
    devices = tuple(sorted({t.device.type for t in request.inputs if isinstance(t, torch.Tensor)}))
    info = InductorProgram(request.label, str(getattr(compiled, "source_code", "") or ""), devices)

    def run(args: list[Any]) -> Sequence[Any]:
        return compiled(args)  # type: ignore[no-any-return]

    if described is None:
        return Made(run, info)  # a closure that does not pickle: the program is not stored
    expected = layouts.output_layouts(decomposed)
    return Made(
        reducible(
            run, _loaded, Deferred(decomposed), described, request.label, config, request.grad_enabled, expected, entry
        ),
        info,
    )


def _loaded(
    decomposed: Deferred[torch.fx.GraphModule],
    described: tuple[TensorSpec | int | float | bool, ...],
    label: str,
    config: dict[str, Any],
    grad_enabled: bool,
    expected: layouts.Layouts,
    entry: fx_entry.EntryKey | None = None,
) -> CompiledFn:
    """The callable of a program loaded from the disk cache: the stored
    decomposed graph compiled with Inductor on its first call (Note [Storing
    Inductor programs], Note [Fake values Inductor makes itself])."""
    compiled: list[Any] = []
    stored = _Stored(decomposed)
    del decomposed

    def run(args: list[Any]) -> Sequence[Any]:
        if not compiled:
            where = fx_cache.described_scope(described)
            with torch.set_grad_enabled(grad_enabled):
                kept = stored.graph
                found = (
                    None
                    if entry is None or kept is None
                    else lowering.load_entry(entry, kept.get, where, label, config, expected)
                )
                if found is not None:  # Note [Inductor's entry by its stored key]
                    stored.graph = None
                    compiled.append(found)
                else:
                    gm = _handed(stored.take())  # Note [A loaded graph handed over]
                    for node, value in zip(gm.graph.find_nodes(op="placeholder"), where.inputs, strict=True):
                        node.meta["val"] = value
                    compiled.append(lowering.compile_decomposed(gm, where, label, config, expected))
        return compiled[0](args)  # type: ignore[no-any-return]

    return reducible(run, _loaded, stored, described, label, config, grad_enabled, expected, entry)
