"""``conveyor.compile``: the callable users get, and its compile cache.

On each call: flatten the arguments, build the cache key, run the cached
compiled callable, or ask :class:`~conveyor.runtime.specialize.Specializations`
for a new one (a symbolic entry whose guards hold, or a capture and compile;
Note [Programs only dynamo can split] there).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.nn.parameter import is_lazy
from torch.utils.hooks import RemovableHandle

from conveyor import dynamo
from conveyor.analysis.signature import CallSignature
from conveyor.errors import CaptureError
from conveyor.frontend.capture import ModuleState
from conveyor.frontend.objects import ObjectArgs, walk_args
from conveyor.frontend.reachable import reached_modules
from conveyor.frontend.subclasses import boundary_key
from conveyor.frontend.wrappers import refuse_distributed_wrapper
from conveyor.protocol.config import Config, resolve
from conveyor.protocol.lowering import warn_eager
from conveyor.protocol.pipeline import Pipeline, StageGraph
from conveyor.protocol.plugins import Plugins
from conveyor.runtime import cache
from conveyor.runtime.entries import EntryCache
from conveyor.runtime.entry_guard import EntryGuard
from conveyor.runtime.recompiles import CallKey
from conveyor.runtime.specialize import Call, Entry, Specializations, program_name


class Compiled:
    """A compiled function or module. Call it as you would the original."""

    def __init__(self, fn: Callable[..., Any], config: Config, plugins: Plugins | None = None) -> None:
        self.fn = fn
        self.module = fn if isinstance(fn, torch.nn.Module) else None
        self.config = config
        self.pipeline = Pipeline(config, plugins)  # fails loudly here, at build time
        refuse_distributed_wrapper(fn)  # Note [Distributed wrappers]
        self._state = ModuleState(self.module) if self.module is not None else None
        # Note [Modules a function reaches]
        self._reached = tuple(ModuleState(m) for m in reached_modules(fn)) if self.module is None else ()
        self.last: Entry | None = None
        self._keyed = tuple(s.cache_key for s in self.pipeline.stages if s.cache_key is not None)
        #: Note [One entry cache]: the entries by full key (symbolic ones: the latest sizes they served)
        self.entries: EntryCache[CallKey, Entry] = EntryCache(program_name(fn), recent_limit=_SIZED)
        self._specializations = Specializations(
            fn, config, self.pipeline, self.entries, functools.partial(_through_dynamo, fn, self.pipeline)
        )
        # Note [A guard per entry]: by the call's structure, non-tensor values, grad mode and autocast
        self._guards: dict[Hashable, list[EntryGuard]] = {}
        #: the module state's version (or the reached modules'), and the hook counter, the guards hold for
        self._epoch: tuple[Hashable, int] = (-1, -1)
        functools.update_wrapper(self, fn, updated=())  # type: ignore[arg-type]

    @property
    def compiles(self) -> int:
        """Captures so far (each a trace and a pipeline compile)."""
        return self._specializations.compiles

    def __getattr__(self, name: str) -> Any:
        # a compiled module still answers for its module: parameters(), train(), ...
        module = self.__dict__.get("module")
        if module is not None:
            return getattr(module, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    # -- the per-call path -------------------------------------------------
    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        state = self._state.tensors() if self._state is not None else ()
        constants: tuple[tuple[int, Any], ...]
        spec_key: Hashable
        leaves: Sequence[Any]
        tensors: Sequence[torch.Tensor]
        objects: ObjectArgs | None = None
        in_spec: pytree.TreeSpec | None = None
        if not kwargs and all(isinstance(a, torch.Tensor) for a in args):
            # the common case, without pytree's cost: positional tensors only
            leaves = tensors = args
            constants, spec_key = (), len(args)
        else:
            leaves, in_spec = pytree.tree_flatten((args, kwargs))
            objects = walk_args(leaves)  # Note [Python objects in and out]
            tensors = found = [v for v in leaves if isinstance(v, torch.Tensor)]
            skip = set(objects.positions) if objects is not None else set()
            constants = tuple(
                (i, v) for i, v in enumerate(leaves) if not isinstance(v, torch.Tensor) and i not in skip
            )
            spec_key = in_spec
            if objects is not None:
                found += objects.tensors
                spec_key = (in_spec, objects.key)
        flat = [*state, *tensors]
        signature = CallSignature.of(flat)  # Note [The call signature]: the one storage scan of this call
        # Note [A guard per entry]: the guards of this argument structure first
        values = _hashable_constants(constants) if constants else ()
        coarse = (spec_key, values, torch.is_grad_enabled(), cache._autocast_key())
        if self._state is not None and self._epoch != (self._state.version, RemovableHandle.next_id):
            self._guards.clear()  # the module's tree, training flags or hooks changed: keys again
            self._epoch = (self._state.version, RemovableHandle.next_id)
        elif self._reached and self._epoch != (_versions(self._reached), RemovableHandle.next_id):
            self._guards.clear()  # Note [Modules a function reaches]
            self._epoch = (_versions(self._reached), RemovableHandle.next_id)
        guards = self._guards.get(coarse)
        entry = None
        if guards is not None:
            for guard in guards:
                if guard.check(tensors, state, signature):
                    entry = guard.entry
                    break
        if entry is None:
            if any(map(is_lazy, flat)):  # Note [Lazy modules]
                warn_eager(program_name(self.fn), "its lazy modules make their parameters on this call (Note [Lazy modules])")
                return self.fn(*args, **kwargs)
            if in_spec is None:
                in_spec = _positional_spec(len(args))
            call = Call(signature, spec_key, values, in_spec, leaves, constants, objects)
            key = self._key(signature, spec_key, values)
            entry = self._lookup(key, call)
            made = EntryGuard.of(tensors, state, signature, self._keyed, entry, key.stages)
            if made is not None:
                guards = self._guards.setdefault(coarse, [])
                guards.insert(0, made)
                del guards[_GUARDS:]
        self.last = entry
        if entry.eager:
            return (self.fn if entry.run is None else entry.run)(*args, **kwargs)
        outs = entry.compiled([*flat, *entry.closure] if entry.closure else flat)
        return entry.layout.unflatten_outputs(outs, objects.containers if objects is not None else ())

    # Note [Lazy modules]: a module with lazy layers (``nn.LazyLinear``) makes
    # its parameters on its first call, from the input's shape; until then
    # they are ``UninitializedParameter``s, which have no shape to key or
    # capture (the call raised). A call that meets one, before any key is
    # made, runs the program eagerly, with a warning: it makes the parameters
    # (and removes the lazy modules' pre-hooks, so the module's hooks changed
    # and its calls are keyed again), and the next call compiles.
    def _lookup(self, key: CallKey, call: Call) -> Entry:
        """The entry of this call's full key: cached, or compiled now."""
        entry = self.entries.get(key)
        if entry is None:
            entry = self._specializations.miss(key, call)
            self.entries.put(key, entry, recent=entry.guards is not None)  # a symbolic entry: these sizes
        return entry

    def _key(self, signature: CallSignature, spec_key: Hashable, values: tuple[tuple[int, Any], ...]) -> CallKey:
        flat = signature.inputs
        core = cache.call_key(signature)  # Note [A cheap call key]
        stage_keys = tuple([s(signature) for s in self._keyed])
        state = self._state
        if state is None:
            reached = self._reached  # Note [Modules a function reaches]
            training = tuple(r.training() for r in reached)
            hooks, tree = tuple(r.hooks for r in reached), tuple(r.structure for r in reached)
            return CallKey(spec_key, values, training, core, stage_keys, boundary_key(flat), hooks, tree)
        # Note [Forward hooks]; Note [Module state per call]
        structure, hooks = state.structure, state.hooks
        return CallKey(spec_key, values, state.training(), core, stage_keys, boundary_key(flat), hooks, structure)


def _versions(states: Sequence[ModuleState]) -> tuple[int, ...]:
    """Each reached module's state version, its dicts read again first."""
    for s in states:
        s.tensors()  # refreshes the state where one of its dicts changed
    return tuple(s.version for s in states)


#: full keys remembered for symbolic entries (each a per-call size-guard check saved)
_SIZED = 256
#: entry guards kept per coarse key, the latest first (more take the full key)
_GUARDS = 8


def _through_dynamo(fn: Callable[..., Any], pipeline: Pipeline) -> Callable[..., Any]:
    """``fn`` compiled by dynamo with ``pipeline`` (Note [Programs only dynamo can split])."""
    return torch.compile(fn, backend=dynamo.backend(pipeline))


@functools.lru_cache(maxsize=64)
def _positional_spec(n: int) -> pytree.TreeSpec:
    return pytree.tree_flatten((tuple(range(n)), {}))[1]


def _hashable_constants(constants: tuple[tuple[int, Any], ...]) -> tuple[tuple[int, Any], ...]:
    """The non-tensor arguments, specialized by value, as a hashable key."""
    try:
        hash(constants)
    except TypeError:  # slices are unhashable before Python 3.12
        constants = tuple((i, _slice_key(v)) for i, v in constants)
    try:
        hash(constants)
    except TypeError as exc:
        bad = next(type(v).__name__ for _, v in constants if not _hashable(v))
        raise CaptureError(
            f"capture: a non-tensor argument of type {bad} is specialized by value and must be hashable"
        ) from exc
    return constants


def _slice_key(v: Any) -> Any:
    return ("slice", v.start, v.stop, v.step) if isinstance(v, slice) else v


def _hashable(v: Any) -> bool:
    try:
        hash(v)
    except TypeError:
        return False
    return True


def compile(fn: Callable[..., Any], *, plugins: Plugins | None = None, **options: Any) -> Compiled:
    """Compile a function or ``nn.Module`` with the conveyor pipeline.

    :param fn: the function or module; called with the same arguments as before.
    :param plugins: a plugin manager to use instead of discovering one (tests).
    :param options: configuration keys (``backend``, ``enable``, ``disable``,
        ``stages``, ...), overriding pyproject.toml and the environment.
    """
    return Compiled(fn, resolve(options), plugins)


def last_graphs(compiled: Any) -> tuple[StageGraph, ...]:
    """Every graph the last call of a compiled function ran, stamped with the
    stage that produced it (Note [Stamps] in ``conveyor.protocol.stamps``): the
    result of ``conveyor.compile``, or of ``torch.compile(...,
    backend="conveyor")`` (that object's graphs: Note [Graphs of a
    torch.compile'd object] in ``conveyor.runtime.dynamo_graphs``).

    :raises ValueError: ``compiled`` has not run a compiled graph yet, or
        conveyor compiled none for it.
    """
    from conveyor.runtime.dynamo_graphs import graphs_of

    if isinstance(compiled, Compiled):
        if compiled.last is None:
            raise ValueError("last_graphs: the compiled function has not been called yet")
        return compiled.last.graphs
    return graphs_of(compiled)
