"""What a call that missed every entry gets: a symbolic entry whose size
guards hold, or a new compile of one specialization (Note [Automatic dynamic
shapes]), captured and run through the pipeline; the entries
``conveyor.compile``'s cache holds.

Note [Programs only dynamo can split]: ``conveyor.compile`` captures a
program as one graph. Two kinds of program cannot be one graph but are
common, and dynamo splits them into graphs with Python between:

* control flow that depends on values (``for e in mask.nonzero()``: Mixtral's
  eager experts), which capture meets as a :class:`DataDependentError`;
* a whole training step, ``loss.backward()`` then ``opt.step()``: the
  optimizer's and the scheduler's state is written outside any argument
  (Note [State a program reaches]; :class:`~conveyor.errors.DynamoSplits`).

Such a specialization is compiled through ``torch.compile`` with this
object's own pipeline (``conveyor.dynamo.backend``), with one warning that
says so and why: what dynamo cannot put in a graph runs in Python, and
conveyor compiles every graph it makes. Every other program a capture
refuses runs eagerly, with a warning (``EagerFallback``).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch._subclasses.fake_tensor import FakeTensorMode

from conveyor.analysis.signature import CallSignature
from conveyor.errors import CaptureError, DataDependentError, DynamoSplits, EagerFallback, StageError, refuses_symbols
from conveyor.frontend.capture import CallLayout, capture
from conveyor.frontend.fallback import watching_capture
from conveyor.frontend.lifted_state import lifted_state
from conveyor.frontend.objects import ObjectArgs
from conveyor.frontend.subclasses import refuse_torch_function_subclasses
from conveyor.protocol import timings
from conveyor.protocol.config import Config
from conveyor.protocol.lowering import warn_eager
from conveyor.protocol.pipeline import Pipeline, StageGraph
from conveyor.protocol.stage import CompiledFn
from conveyor.runtime import dynamic_shapes, recompiles
from conveyor.runtime.entries import EntryCache
from conveyor.runtime.recompiles import CallKey
from conveyor.runtime.stored_graphs import Graphs, resolve
from conveyor.runtime.subclass_joint import compile_program


@dataclass(frozen=True)
class Entry:
    """One compiled specialization."""

    compiled: CompiledFn
    layout: CallLayout
    #: the stage graphs (``graphs``; Note [Stage graphs loaded on demand])
    stage_graphs: Graphs
    backend: str
    #: tensors the program closes over, passed after the flat arguments
    closure: tuple[torch.Tensor, ...] = ()
    #: run ``run`` (the original program, or dynamo's compile of it) instead
    eager: bool = False
    #: the size relations a symbolic entry assumed (Note [Automatic dynamic shapes])
    guards: dynamic_shapes.Guards | None = None
    #: what runs in place of a compiled program, when ``eager`` (the original, if ``None``)
    run: Callable[..., Any] | None = None

    @property
    def graphs(self) -> tuple[StageGraph, ...]:
        """The stage graphs (``conveyor.last_graphs``)."""
        return resolve(self.stage_graphs)


@dataclass(frozen=True)
class Call:
    """One call that missed every entry guard: what its lookup and, on a
    miss, its compile need, described once and handed down.

    :ivar signature: the call's signature (its flat inputs: lifted state,
        then the call's tensors; Note [The call signature]).
    :ivar structure: the argument structure part of the key (a count of
        positional tensors, a pytree spec, with argument objects' structure).
    :ivar values: the non-tensor arguments by leaf position, hashable.
    :ivar in_spec: the pytree spec of ``(args, kwargs)``.
    :ivar leaves: the call's pytree leaves.
    :ivar constants: the non-tensor leaves, as passed.
    :ivar objects: the tensors inside argument objects (Note [Python objects in and out]).
    """

    signature: CallSignature
    structure: Hashable
    values: tuple[tuple[int, Any], ...]
    in_spec: pytree.TreeSpec
    leaves: Sequence[Any]
    constants: tuple[tuple[int, Any], ...]
    objects: ObjectArgs | None

    @property
    def flat(self) -> Sequence[Any]:
        return self.signature.inputs


@dataclass
class SizesSeen:
    """Note [Automatic dynamic shapes]: what one key without sizes has seen.

    :ivar first: the sizes of the first call compiled.
    :ivar entries: the symbolic entries (and eager fallbacks) that serve any size.
    :ivar dims: the ``(input, dim)`` pairs made symbolic so far.
    :ivar static_only: a stage refused symbolic sizes: compile static from now on.
    """

    first: dynamic_shapes.Sizes | None = None
    entries: list[Entry] = field(default_factory=list)
    dims: frozenset[tuple[int, int]] = frozenset()
    static_only: bool = False


class Specializations:
    """Compiles the specializations of one program, as its calls miss
    (``conveyor.compile``'s :class:`~conveyor.Compiled` asks on a miss)."""

    def __init__(
        self,
        fn: Callable[..., Any],
        config: Config,
        pipeline: Pipeline,
        entries: EntryCache[CallKey, Entry],
        through_dynamo: Callable[[], Callable[..., Any]],
    ) -> None:
        self.fn = fn
        self.module = fn if isinstance(fn, torch.nn.Module) else None
        self.config = config
        self.pipeline = pipeline
        #: the entry cache, told of each miss for Note [Recompile reasons]
        self.entries = entries
        #: captures so far (each a trace and a pipeline compile)
        self.compiles = 0
        self._stage_names = [s.name for s in pipeline.stages if s.cache_key is not None]
        # Note [Automatic dynamic shapes]: by the key without sizes
        self._sizes: dict[CallKey, SizesSeen] = {}
        #: makes the program compiled by dynamo with this pipeline (Note [Programs only dynamo can split])
        self._make_split = through_dynamo
        self._split: Callable[..., Any] | None = None

    def _input_names(self, call: Call) -> tuple[list[str], list[str]]:
        """Names of the flat inputs and of the call's leaves, for the log."""
        args, kwargs = pytree.tree_unflatten(list(call.leaves), call.in_spec)
        leaf_names = recompiles.leaf_names(self.module.forward if self.module is not None else self.fn, args, kwargs)
        state_names = lifted_state(self.module)[0] if self.module is not None else []
        tensor_leaves = [i for i, v in enumerate(call.leaves) if isinstance(v, torch.Tensor)]
        return recompiles.flat_names(state_names, leaf_names, tensor_leaves, len(call.flat)), leaf_names

    def _log_miss(self, key: CallKey, call: Call, how: str) -> None:
        """Note [Recompile reasons]: a first compile, or what differs from
        the closest key compiled before (its inputs named as this call's)."""
        names, leaf_names = self._input_names(call)
        stages = self._stage_names
        self.entries.miss(key, how, lambda old, new: recompiles.call_changes(old, new, names, leaf_names, stages))

    # -- a cache miss -------------------------------------------------------
    def miss(self, key: CallKey, call: Call) -> Entry:
        """A symbolic entry whose guards hold, or a new compile: symbolic when
        this call differs from an earlier one only in sizes (Note [Automatic
        dynamic shapes])."""
        dynamic = self.config.dynamic
        logging = recompiles.enabled()
        flat = call.flat
        if dynamic is False:
            if logging:
                self._log_miss(key, call, "static sizes (dynamic=False)")
            return self._compile(call)
        sizes = self._sizes.setdefault(key._replace(core=dynamic_shapes.shapeless_key(call.signature)), SizesSeen())
        for entry in sizes.entries:
            if entry.guards is None or entry.guards.check([*flat, *entry.closure]):
                if logging:
                    self.entries.hit(key, "an entry with symbolic sizes whose size guards hold")
                return entry
        dims: frozenset[tuple[int, int]] = frozenset()
        if not sizes.static_only and dynamic_shapes.can_be_symbolic(call.signature) is None:
            if dynamic:
                dims = dynamic_shapes.all_dims(flat)
            elif sizes.first is not None:
                dims = sizes.dims | dynamic_shapes.changed_dims(sizes.first, dynamic_shapes.sizes(flat))
        if logging:
            failed = [e.guards.source for e in sizes.entries if e.guards is not None]
            names = self._input_names(call)[0]
            how = (
                f"symbolic sizes in {', '.join(f'{names[i]} dim {d}' for i, d in sorted(dims))}"
                if dims
                else "static sizes"
            )
            if failed:
                how += f"; the size guards of {len(failed)} symbolic entr{'y' if len(failed) == 1 else 'ies'} fail: "
                how += " | ".join(recompiles.clip(f, 160) for f in failed)
            self._log_miss(key, call, how)
        if not dims:
            entry = self._compile(call)
            if sizes.first is None:
                sizes.first = dynamic_shapes.sizes(flat)
            if entry.eager:  # the same for every size: capture once
                sizes.entries.append(entry)
            return entry
        entry = self._compile(call, dims)
        if entry.guards is not None or entry.eager:
            sizes.dims = dims
            sizes.entries.append(entry)
        else:  # a stage refused symbolic sizes (warned): try no more for this key
            sizes.static_only = True
        return entry

    def _compile(self, call: Call, dims: frozenset[tuple[int, int]] = frozenset()) -> Entry:
        """Compile ``call``, with ``dims`` symbolic; static where a stage
        declares it refuses symbolic sizes or the capture fails under them
        (Note [Refusing symbolic sizes]): any other failure propagates."""
        if dims:
            try:
                return self._compile_once(call, dims)
            except (CaptureError, StageError) as exc:
                if isinstance(exc, StageError) and not refuses_symbols(exc):
                    raise  # a stage that failed for another reason: loud, never hidden behind a static compile
                warnings.warn(
                    f"conveyor: compiling {self._name()} with static sizes: with symbolic sizes it failed: "
                    f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}",
                    stacklevel=4,
                )
        return self._compile_once(call, dims=frozenset())

    def _name(self) -> str:
        return program_name(self.fn)

    def _compile_once(self, call: Call, dims: frozenset[tuple[int, int]]) -> Entry:
        self.compiles += 1
        flat = call.flat
        state_names = lifted_state(self.module)[0] if self.module is not None else []
        pipeline = self._pipeline_for(flat)
        layout = CallLayout(
            in_spec=call.in_spec,
            tensor_positions=tuple(i for i, v in enumerate(call.leaves) if isinstance(v, torch.Tensor)),
            constants=call.constants,
            n_lifted=len(state_names),
        )
        if dims:
            fake_mode, fakes = dynamic_shapes.symbolic_fakes(flat, dims)
        else:
            fake_mode = FakeTensorMode()
            fakes = [fake_mode.from_tensor(t, static_shapes=True) for t in flat]
        started = timings.stopwatch()  # Note [Compile timings]
        try:
            refuse_torch_function_subclasses(flat)
            with watching_capture():
                traced, closure, layout = capture(
                    self.fn, self.module, state_names, layout, fakes, fake_mode, call.objects
                )
        except (DynamoSplits, DataDependentError) as exc:  # Note [Programs only dynamo can split]
            warnings.warn(
                f"conveyor: compiling {self._name()} through dynamo, which splits it where one graph cannot hold "
                f"it: {str(exc).splitlines()[0]}",
                stacklevel=5,
            )
            return Entry(_no_compiled, layout, (), "dynamo (split)", eager=True, run=self._through_dynamo())
        except EagerFallback as exc:
            warn_eager(self._name(), str(exc))
            return Entry(_no_compiled, layout, (), "eager (fallback)", eager=True)
        captured = timings.Captured(started, timings.stopwatch() - started)
        fakes += [fake_mode.from_tensor(t, static_shapes=True) for t in closure]
        with timings.compiling(self._name(), pipeline.config, captured):
            compiled, graphs = compile_program(pipeline, traced, fakes, fake_mode)  # Note [Tensor subclasses]
        guards = dynamic_shapes.Guards.of(fake_mode, fakes) if dims else None
        return Entry(compiled, layout, graphs, pipeline.backend.name, closure, guards=guards)

    def _through_dynamo(self) -> Callable[..., Any]:
        """The program compiled by dynamo with this pipeline, made once."""
        if self._split is None:
            self._split = self._make_split()
        return self._split

    def _pipeline_for(self, flat: Sequence[Any]) -> Pipeline:
        """The configured pipeline; with no backend configured, the backend
        that declares itself the default for the inputs' devices, if any."""
        return self.pipeline.for_devices(frozenset(t.device.type for t in flat if isinstance(t, torch.Tensor)))


def program_name(fn: Callable[..., Any]) -> str:
    """The name warnings and logs give a compiled function or module."""
    return getattr(fn, "__qualname__", type(fn).__qualname__)


def _no_compiled(args: list[Any]) -> Sequence[Any]:
    raise AssertionError("an eager fallback entry has no compiled program")
