"""``torch.compile(model, backend="conveyor")``: the dynamo backend.

Registered through the ``torch_dynamo_backends`` entry point. Dynamo hands us
a torch-level FX graph and example inputs; we compile at lowering time, with
dynamo's fake mode and shape environment (so guards our tracing adds reach
dynamo's guard set). Dynamo guards sizes and strides itself; at run time we
check only what dynamo does not: grad mode, which inputs share storage, and
what stages specialize on. A different answer compiles again, with static
shapes, for that pattern. Scalars the graph reads with ``.item()`` are
specialized on (Note [Scalars read with item()] in
:mod:`conveyor.runtime.dynamo_items`); the pipeline of each configuration is
built once (Note [One pipeline per configuration behind dynamo] in
:mod:`conveyor.runtime.dynamo_pipelines`).
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
import torch.fx
from torch._guards import detect_fake_mode
from torch._subclasses.fake_tensor import FakeTensor, FakeTensorMode

from conveyor.analysis.signature import CallSignature
from conveyor.errors import DataDependentError, EagerFallback, StageError, refuses_symbols
from conveyor.frontend import functions, subclasses
from conveyor.frontend.autograd_state import sets_data, watching_user_code
from conveyor.frontend.capture import trace_user
from conveyor.frontend.closure import trace_closing_over
from conveyor.frontend.fallback import watching_capture
from conveyor.frontend.transform_state import restored_on_failure
from conveyor.protocol import structured_trace, timings
from conveyor.protocol.config import resolve
from conveyor.protocol.lowering import warn_eager
from conveyor.protocol.pipeline import Pipeline, StageGraph
from conveyor.protocol.stage import CompiledFn
from conveyor.runtime import cache, dynamo_graphs, dynamo_key, recompiles
from conveyor.runtime.dynamo_items import item_values, read_with_item, with_constant_items
from conveyor.runtime.dynamo_pipelines import pipeline_of
from conveyor.runtime.entries import EntryCache
from conveyor.runtime.stored_graphs import Graphs
from conveyor.runtime.subclass_joint import compile_program


def last_dynamo_graphs() -> tuple[StageGraph, ...]:
    """The stage graphs of the graph dynamo most recently ran through conveyor,
    whichever object it belongs to; ``conveyor.last_graphs(compiled)`` gives
    one object's (Note [Graphs of a torch.compile'd object])."""
    return dynamo_graphs.last_run()


# Note [Inference mode behind dynamo]: dynamo keeps a ``torch.inference_mode()``
# (or ``inference_mode(False)``) region inside its graph as a pair of calls,
# ``_enter_inference_mode`` and ``_exit_inference_mode``, and compiles the graph
# with inference mode off whatever the caller's. What the region makes is an
# inference tensor (or, under a caller in inference mode, a normal one) in eager;
# a graph keeps no such region, so its results came back made in the caller's
# mode (aot_eager alike; Note [Outputs made in another inference mode] is
# ``conveyor.compile``'s side). Such a graph runs as dynamo made it, with a
# warning: its calls enter and leave the region as eager does.
_ENTER_INFERENCE_MODE = getattr(torch.autograd.grad_mode, "_enter_inference_mode", None)

# Note [Global settings set behind dynamo]: dynamo puts
# ``torch.use_deterministic_algorithms(..)`` (as ``torch._C._set_deterministic_algorithms``),
# ``torch.set_default_dtype(..)`` and ``torch.set_float32_matmul_precision(..)`` in its
# graph as calls, and has already run them while it traced, so capture starts with
# the setting made and sees no change (Note [A program that leaves grad mode changed] cannot fire); the graph
# kept nothing, and the caller's setting stayed as it was where eager (and the
# graph run as dynamo made it) leaves it changed (aot_eager alike; h_misc, session
# 13). Such a graph runs as dynamo made it, with a warning.
_GLOBAL_SETTERS = {
    torch._C._set_deterministic_algorithms: "deterministic algorithms",
    torch.use_deterministic_algorithms: "deterministic algorithms",
    torch.set_default_dtype: "the default dtype",
    torch._C._set_default_dtype: "the default dtype",
    torch.set_float32_matmul_precision: "float32 matmul precision",
    torch._C._set_float32_matmul_precision: "float32 matmul precision",
}


def _global_setting(gm: torch.fx.GraphModule) -> str | None:
    """What global setting a call in ``gm`` sets (Note [Global settings set behind dynamo])."""
    for n in gm.graph.nodes:
        if n.op == "call_function" and isinstance(n.target, Hashable) and n.target in _GLOBAL_SETTERS:
            return _GLOBAL_SETTERS[n.target]
    return None


@dataclass(frozen=True)
class DynamoEntry:
    """One compile of a dynamo graph.

    :ivar compiled: the compiled graph (``None``: the graph runs as dynamo
        made it, warned: Note [Functions behind dynamo] and the like).
    :ivar stage_graphs: the stage graphs (``conveyor.last_graphs``; Note
        [Stage graphs loaded on demand]).
    """

    compiled: CompiledFn | None
    stage_graphs: Graphs = ()


class DynamoCompiled:
    """What dynamo calls in place of its graph.

    Note [One entry cache]: the graph compiled at dynamo's lowering serves
    every call whose unguarded key (Note [What dynamo's guards decide])
    equals the lowering's; any other call is keyed in full and served from,
    or compiled statically into, :attr:`entries`.
    """

    def __init__(self, gm: torch.fx.GraphModule, example_inputs: Sequence[Any], pipeline: Pipeline) -> None:
        self.gm = gm
        self.pipeline = pipeline
        self.piece = dynamo_graphs.new_piece()  # Note [Graphs of a torch.compile'd object]
        # Note [Functions behind dynamo] in conveyor.frontend.functions: what capture traces
        self._traced = functions.with_functions_as_nodes(gm)
        self._items = read_with_item(gm, example_inputs)  # Note [Scalars read with item()]
        self._keyed = tuple(s.cache_key for s in pipeline.stages if s.cache_key is not None)
        # dynamo's tensor guards hold requires_grad: these positions require grad on every call
        self._grad_positions = tuple(
            i for i, x in enumerate(example_inputs) if isinstance(x, torch.Tensor) and x.requires_grad
        )
        # Note [Recompile reasons]: the graph's name in the log, and its inputs' names
        compile_id = self.compile_id = torch._guards.CompileContext.current_compile_id()
        self.name = f"dynamo graph {compile_id}" if compile_id is not None else "a dynamo graph"
        self._names = _input_names(gm, len(example_inputs))  # dynamo drops its sources after lowering
        stages = [s.name for s in pipeline.stages if s.cache_key is not None]
        names = self._names
        #: other grad modes / aliasing patterns / scalar values: compiled statically, keyed by shapes too
        self.entries: EntryCache[recompiles.DynamoKey, DynamoEntry] = EntryCache(
            self.name, lambda o, n: _changes(o, n, names, stages)
        )
        self._stage_names = stages
        self._lowered_key: recompiles.DynamoKey | None = None
        self._all_leaves = False  # every input that required grad at lowering was a leaf
        self._lowered = DynamoEntry(None)
        if any(isinstance(example_inputs[i], FakeTensor) for i in self._items):
            return  # no values to specialize on yet: the first call compiles
        if any(subclasses.is_subclass(x) for x in example_inputs) and _symbolic(example_inputs):
            return  # Note [Tensor subclasses]: their outer sizes are static; the first call compiles
        fake_mode = detect_fake_mode(example_inputs) or FakeTensorMode()
        fakes = [_fakeify(x, fake_mode) for x in example_inputs]
        # the specialization dynamo compiled for: any sizes dynamo's guards allow
        lowered = CallSignature.of(example_inputs)
        self._lowered_key = self._key(lowered, shapes=False)
        self._all_leaves = all(lowered.leaves(self._grad_positions))
        if recompiles.enabled():
            self.entries.miss(self._lowered_key, "at dynamo's lowering, for any sizes its guards allow", against=[])
        try:
            self._lowered = self._compile(fakes, fake_mode, self._item_values(example_inputs))
        except StageError as exc:
            if not (_symbolic(example_inputs) and refuses_symbols(exc)):
                raise  # a stage that failed for another reason: loud
            # Note [Refusing symbolic sizes]: each call compiles with its static sizes instead
            warnings.warn(
                f"conveyor: compiling {self.name} with static sizes: with symbolic sizes it failed: "
                f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                stacklevel=2,
            )
            self._lowered_key = None

    def _item_values(self, flat: Sequence[Any]) -> dict[int, Any]:
        return item_values(flat, self._items)

    def _key(self, signature: CallSignature, shapes: bool) -> recompiles.DynamoKey:
        """The call's key: with ``shapes``, the whole core key; without, what
        dynamo's guards leave out (Note [What dynamo's guards decide])."""
        flat = signature.inputs
        stage_keys = tuple([s(signature) for s in self._keyed])
        core = cache.call_key(signature) if shapes else _unguarded_key(signature, self._grad_positions)
        values = tuple(x for x in flat if not isinstance(x, torch.Tensor)) if shapes else ()
        items = tuple(self._item_values(flat).items()) if self._items else ()
        return recompiles.DynamoKey(core, stage_keys, values, items)

    def _log_miss(self, signature: CallSignature, key: recompiles.DynamoKey) -> None:
        """Note [Recompile reasons]: what differs from the specialization
        compiled at lowering time (by what dynamo's guards leave out), else
        from the closest static entry."""
        names, stages = self._names, self._stage_names
        how = "static sizes, for this call's specialization"
        if self._lowered_key is not None:
            unguarded = self._key(signature, shapes=False)
            positions = self._grad_positions
            self.entries.miss(
                unguarded, how, lambda o, n: _changes(o, n, names, stages, positions), against=[self._lowered_key]
            )
            return
        self.entries.miss(key, how)

    def _compile(self, fakes: Sequence[Any], fake_mode: Any, items: dict[int, Any]) -> DynamoEntry:
        """The compiled graph (``compiled`` ``None`` where it must run eagerly, warned)."""
        gm = with_constant_items(self._traced, items)
        if any(sets_data(n) for n in gm.graph.nodes):
            warn_eager("a dynamo graph", "it sets a tensor's .data (Note [Data set behind dynamo])")
            return DynamoEntry(None)
        setting = _global_setting(gm)
        if setting is not None:
            warn_eager("a dynamo graph", f"it sets {setting} (Note [Global settings set behind dynamo])")
            return DynamoEntry(None)
        if any(n.target is _ENTER_INFERENCE_MODE for n in gm.graph.nodes):
            warn_eager("a dynamo graph", "it enters or leaves inference mode (Note [Inference mode behind dynamo])")
            return DynamoEntry(None)
        pre = dynamo_key.Precapture.of(self.pipeline, gm, fakes, torch.is_grad_enabled())  # Note [Keyed before capture]
        found = pre.load()
        if found is not None:
            return DynamoEntry(*found)
        with pre.recording():
            return self._capture_and_compile(gm, fakes, fake_mode)

    def _capture_and_compile(self, gm: torch.fx.GraphModule, fakes: Sequence[Any], fake_mode: Any) -> DynamoEntry:
        """Capture dynamo's graph ``gm`` and compile it (``compiled`` ``None``
        where it must run eagerly, warned)."""

        def flat_fn(*args: Any) -> tuple[Any, ...]:
            # Note [Autograd state changed by the program]: dynamo puts ``detach_``,
            # ``requires_grad_`` and ``.data =`` in its graph as method calls, which a
            # trace below autograd would record as nothing: refused as in capture
            with watching_user_code() as autograd_state:
                out = torch.fx.Interpreter(gm).run(*args)  # Note [Dynamo's graph interpreted]
            flat = tuple(out) if isinstance(out, (tuple, list)) else (out,)
            autograd_state.refuse_outputs_needing_sources(flat)
            return flat

        # Note [Dynamo's graph interpreted]: the trace runs dynamo's graph node by
        # node, as AOTAutograd does, rather than calling it: dynamo's graph module
        # generates its Python code when first called (14 ms on MobileNetV2's 573
        # nodes), for a trace that records the same ops either way
        started = timings.stopwatch()  # Note [Compile timings]
        try:
            with watching_capture(seeding=False), restored_on_failure():  # Note [Transform state a stopped trace leaves]
                # Note [Tensors a dynamo graph holds]: dynamo keeps some real tensors as
                # attributes of its graph (the parameters an optimizer step updates):
                # they become graph inputs after the call's, as a standalone
                # program's closed-over tensors do (Note [Tensors a program closes over])
                traced, closure = trace_closing_over(
                    lambda f, inputs: trace_user(f, inputs, fake_mode), flat_fn, fakes, fake_mode
                )
        except (EagerFallback, DataDependentError) as exc:
            # a graph dynamo made can still need a value its trace cannot know (``narrow``
            # given a tensor start reads it inside the op): dynamo split what it could
            warn_eager("a dynamo graph", str(exc).splitlines()[0])
            return DynamoEntry(None)
        captured = timings.Captured(started, timings.stopwatch() - started)
        lifted = [*fakes, *(fake_mode.from_tensor(t, static_shapes=True) for t in closure)]
        with timings.compiling(self.name, self.pipeline.config, captured):
            compiled, graphs = compile_program(self.pipeline, traced, lifted, fake_mode)  # Note [Tensor subclasses]
        if not closure:
            return DynamoEntry(compiled, graphs)

        def run(args: list[Any]) -> Sequence[Any]:
            return compiled([*args, *closure])

        return DynamoEntry(run, graphs)

    def __call__(self, *args: Any) -> Sequence[Any]:
        signature = CallSignature.of(args)  # Note [The call signature]: one storage scan per call
        entry = self._lowered if self._holds_lowered(signature) else self._static_entry(signature, args)
        self.piece.last = (dynamo_graphs.ticks(), entry.stage_graphs)
        run = entry.compiled
        if run is None:
            return self.gm(*args)  # type: ignore[no-any-return]
        return run(list(args))

    def _holds_lowered(self, signature: CallSignature) -> bool:
        """Whether the call's unguarded key equals the lowering's (Note [What
        dynamo's guards decide]): the same comparison as building
        ``self._key(signature, shapes=False)``, part by part, cheapest first,
        without building it."""
        key = self._lowered_key
        if key is None:
            return False
        lowered: UnguardedKey = key.core  # type: ignore[assignment]
        return (
            signature.groups == lowered.groups
            and torch.is_grad_enabled() == lowered.grad_enabled
            and cache._autocast_key() == lowered.autocast
            and (not lowered.leaves or self._leaves_hold(signature, lowered.leaves))
            and (not key.stages or tuple([s(signature) for s in self._keyed]) == key.stages)
            and (not key.items or tuple(self._item_values(signature.inputs).items()) == key.items)
        )

    def _leaves_hold(self, signature: CallSignature, leaves: tuple[bool, ...]) -> bool:
        """The inputs that require grad have the leafness ``leaves``. When
        all were leaves at lowering, one ``map`` over every input (plain
        tensors): dynamo's guards hold ``requires_grad``, and a tensor that
        does not require grad is a leaf."""
        if signature.plain and self._all_leaves:
            return all(map(_is_leaf, signature.inputs))
        return signature.leaves(self._grad_positions) == leaves

    def _static_entry(self, signature: CallSignature, args: Sequence[Any]) -> DynamoEntry:
        """The entry of a call the lowered graph does not serve: by its full
        key, cached or compiled now with static sizes."""
        key = self._key(signature, shapes=True)
        found = self.entries.get(key, "static entry")
        if found is None:
            if recompiles.enabled():
                self._log_miss(signature, key)
            fake_mode = FakeTensorMode()
            fakes = [_fakeify(x, fake_mode, static=True) for x in args]
            with structured_trace.compile_id(self.compile_id):  # Note [Structured trace]: beside dynamo's
                found = self._compile(fakes, fake_mode, self._item_values(args))
            self.entries.put(key, found)
        return found


class UnguardedKey(NamedTuple):
    """The core of a dynamo graph's call key without shapes
    (:func:`_unguarded_key`; ``recompiles.core_changes`` reads its four
    parts in this order)."""

    grad_enabled: bool
    autocast: Hashable
    leaves: tuple[bool, ...]  #: of the inputs that require grad
    groups: tuple[int, ...]  #: ``CallSignature.groups``


def _unguarded_key(signature: CallSignature, grad_positions: tuple[int, ...]) -> UnguardedKey:
    """Note [What dynamo's guards decide]: the part of a call that dynamo's
    guards do not check but a compiled graph depends on: which inputs share
    storage and the leafness of the inputs that require grad (the others are
    leaves); grad mode and autocast (dynamo's global-state guard holds them
    at the frame's entry, but a graph piece that DDPOptimizer split off may
    start inside a region that changed them: two reads per call). Python
    type (``nn.Parameter`` at run time, a plain fake at lowering under
    DDPOptimizer), dtype, device, sizes, strides and ``requires_grad`` are
    what dynamo's tensor guards check on every input: keying on them here
    would be that work again per call (and would compile again, statically,
    what the lowered graph already serves). No Python loop over the inputs:
    ``map`` over the positions that require grad, and the call's one
    storage scan (Note [The call signature])."""
    return UnguardedKey(
        torch.is_grad_enabled(), cache._autocast_key(), signature.leaves(grad_positions), signature.groups
    )


_is_leaf = operator.attrgetter("is_leaf")


def _input_names(gm: torch.fx.GraphModule, n: int) -> list[str]:
    """The source dynamo gives each graph input (``L['x']``), else the placeholder's name."""
    names = []
    for node in gm.graph.nodes:
        if node.op != "placeholder":
            continue
        name = getattr(getattr(node.meta.get("grapharg"), "source", None), "name", None)
        try:
            name = name() if callable(name) else name  # a method in some torch releases, a property in others
        except Exception:  # a source that cannot name itself
            name = None
        names.append(name if isinstance(name, str) else node.name)
    return [*names, *(f"#{i}" for i in range(len(names), n))]


def _changes(
    old: recompiles.DynamoKey,
    new: recompiles.DynamoKey,
    names: Sequence[str],
    stage_names: Sequence[str],
    unguarded: Sequence[int] | None = None,
) -> list[str]:
    """What differs between two keys of a dynamo graph's calls (``unguarded``:
    the positions whose leafness two unguarded keys hold)."""
    found = recompiles.core_changes(old.core, new.core, names, unguarded)
    if old.values != new.values:
        found.append(f"non-tensor inputs {old.values} -> {new.values}")
    if old.items != new.items:
        found.append(f"values read with .item() {dict(old.items)} -> {dict(new.items)}")
    if old.stages != new.stages:
        found += recompiles.stage_changes(old.stages, new.stages, stage_names)
    return found


def _symbolic(example_inputs: Sequence[Any]) -> bool:
    """Some size or int input is symbolic."""
    return any(
        isinstance(s, torch.SymInt)
        for x in example_inputs
        for s in ((*x.size(), *x.stride()) if isinstance(x, torch.Tensor) else (x,))
    )


def _fakeify(x: Any, fake_mode: Any, static: bool = False) -> Any:
    if subclasses.is_subclass(x):
        if not static and subclasses.is_fake(x):
            return x  # dynamo's fake, with fake inner tensors
        return fake_mode.from_tensor(x, static_shapes=True)  # Note [Tensor subclasses]
    if isinstance(x, torch.Tensor) and not isinstance(x, FakeTensor):
        return fake_mode.from_tensor(x, static_shapes=static) if static else fake_mode.from_tensor(x)
    return x


def conveyor_backend(
    gm: torch.fx.GraphModule, example_inputs: Sequence[Any], options: dict[str, Any] | None = None
) -> DynamoCompiled:
    """The dynamo backend function (``torch._dynamo.list_backends()`` lists it);
    one pipeline per configuration (Note [One pipeline per configuration
    behind dynamo])."""
    return backend(pipeline_of(resolve(options or {})))(gm, example_inputs)


def backend(pipeline: Pipeline) -> Callable[[torch.fx.GraphModule, Sequence[Any]], DynamoCompiled]:
    """A dynamo backend that compiles each graph with ``pipeline`` (its
    default backend picked by the graph's devices)."""

    def compile_graph(gm: torch.fx.GraphModule, example_inputs: Sequence[Any]) -> DynamoCompiled:
        devices = frozenset(x.device.type for x in example_inputs if isinstance(x, torch.Tensor))
        return DynamoCompiled(gm, example_inputs, pipeline.for_devices(devices))

    return compile_graph
