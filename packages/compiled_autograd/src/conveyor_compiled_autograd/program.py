"""One segment of a captured backward, compiled by conveyor's pipeline: ``SegmentProgram``.

Compiled on its first call, from the values it receives: the segment's nodes
are run under ``make_fx`` (``conveyor.retrace``), which turns the C++
formulas (``ops.<Name>Backward0``) into aten, and the aten graph goes through
the configured :class:`conveyor.Pipeline` as a ``Request`` with grad mode off.

Note [Symbolic sizes]: torch's engine lifts every size of the backward into
the ``sizes`` input, so one capture serves every batch size. A segment is
first compiled for the sizes it sees (static: fast to compile, and training
at one size never needs more). When a call comes with other sizes, it is
compiled once more for all of them (as ``conveyor.compile``'s automatic
``dynamic`` does; ``dynamic=True`` skips the static step, ``dynamic=False``
stays static): the sizes of tensor inputs that differ between the calls
that compiled become symbols and the integer inputs that differ, SymInts
(Note [Only changed sizes symbolic]; with ``dynamic=True``, every size), in
a ``FakeTensorMode`` with its own ``ShapeEnv``. Whatever the trace or a stage assumed about a symbol
(a size of 0 or 1 specialized, two sizes equal, a stride) is a guard of that
shape environment; each call checks the guards of the compiled variants in
order and compiles a new variant only when none holds. Non-integer scalars
and other constants (``None``, floats, dtypes) are specialized by value.
When a stage rejects symbolic sizes (the ``functionalize`` stage, for an
output that aliases an input, accepts static shapes only), the segment is
compiled again with static shapes and that variant is valid for exactly
those sizes, strides and integers (``SegmentProgram.specialized`` says why).

A segment the pipeline cannot compile (an op the trace or a stage does not
support, e.g. a sparse gradient) runs node by node as torch would run it,
after a warning that names the segment and the cause: slower, not wrong.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
from conveyor import Pipeline, Request, StageGraph, retrace
from conveyor.stage_api import CallSignature, writes
from torch._dynamo.source import ConstantSource
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import SYMPY_INTERP, DimDynamic, ShapeEnv, StatelessSymbolicContext
from torch.utils._python_dispatch import _disable_current_modes

from conveyor_compiled_autograd.accumulate import fresh_outputs
from conveyor_compiled_autograd.below import GUARD, separate, unobserved
from conveyor_compiled_autograd.names import STAGE
from conveyor_compiled_autograd.plan import Segment, run_node
from conveyor_compiled_autograd.recheck import LastVariant
from conveyor_compiled_autograd.simplify import simplify

#: Note [Stages a segment skips]: ``synthetic_base`` merges inputs that share
#: storage *and are written*; its analysis reads every input's sizes as ints,
#: which would specialize the symbolic sizes. A segment graph that writes no
#: input (every one torch's formulas produce) has nothing for it to do, so it
#: is compiled without it; a graph that writes gets the full pipeline.
SKIPPED_FOR_FUNCTIONAL = ("synthetic_base",)


@functools.lru_cache(maxsize=16)
def for_functional_graphs(pipeline: Pipeline) -> Pipeline:
    """``pipeline`` without the stages of Note [Stages a segment skips]."""
    skip = tuple(s.name for s in pipeline.stages if s.name in SKIPPED_FOR_FUNCTIONAL)
    if not skip:
        return pipeline
    config = pipeline.config
    config = dataclasses.replace(
        config, enable=tuple(n for n in config.enable if n not in skip), disable=(*config.disable, *skip)
    )
    return Pipeline(config, pipeline.plugins)


class Uncompilable(Exception):
    """The segment cannot be compiled; it runs node by node."""


@dataclass(frozen=True)
class Variant:
    """One compilation of a segment, valid where its guards hold."""

    compiled: Callable[[list[Any]], Sequence[Any]]
    guards: Any  # a code object over ``L`` (the dynamic inputs by name t0, t1, ...), or None
    #: for each segment output: its position among the compiled outputs, or None (the output is None)
    outputs: tuple[int | None, ...]
    graphs: tuple[StageGraph, ...]
    #: the pipeline's stages that specialize on the call (``StageSpec.cache_key``), and their keys at compile time
    keyed: tuple[Any, ...] = ()
    stage_keys: tuple[Hashable, ...] = ()
    #: a variant compiled with static shapes (Note [Symbolic sizes]): the sizes, strides and ints it is valid for
    static: tuple[Any, ...] | None = None
    #: its graph writes no input (compiled by the functional pipeline; Note [Below autograd])
    functional: bool = False
    #: a symbolic variant's static sizes ``(input, dim, size)`` (Note [Only changed sizes symbolic]),
    #: which its shape environment's guards do not check
    fixed: tuple[tuple[int, int, int], ...] = ()
    #: ``compiled`` taking its list (it clears it), where the backend offers it (Note [Inputs freed early])
    taking: Callable[[list[Any]], Sequence[Any]] | None = None

    def holds(self, dynamic: Sequence[Any]) -> bool:
        """Whether this variant is valid for these dynamic inputs."""
        if self.keyed and _stage_keys(self.keyed, dynamic) != self.stage_keys:
            return False
        if self.static is not None:
            return _signature(dynamic) == self.static
        for k, d, size in self.fixed:
            if dynamic[k].shape[d] != size:
                return False
        if self.guards is None:
            return True
        return bool(eval(self.guards, SYMPY_INTERP, {"L": {f"t{i}": v for i, v in enumerate(dynamic)}}))


def _signature(dynamic: Sequence[Any]) -> tuple[Any, ...]:
    return tuple((v.shape, v.stride(), v.storage_offset()) if isinstance(v, torch.Tensor) else v for v in dynamic)


def _stage_keys(stages: Sequence[Any], dynamic: Sequence[Any]) -> tuple[Hashable, ...]:
    """The stages' keys of these inputs, from one signature (Note [The call signature])."""
    signature = CallSignature.of(dynamic)
    return tuple(s.cache_key(signature) for s in stages)


def _split(values: Sequence[Any]) -> tuple[list[int], tuple[Hashable, ...]]:
    """The positions of dynamic inputs (tensors, ints) and the key of the rest."""
    dynamic: list[int] = []
    key: list[Hashable] = []
    for i, v in enumerate(values):
        if isinstance(v, torch.Tensor):
            dynamic.append(i)
            key.append(("T", v.dtype, v.device, v.dim(), v.layout, v.is_contiguous()))
        elif isinstance(v, int) and not isinstance(v, bool):
            dynamic.append(i)
            key.append(("i", v if v in (0, 1) else None))
        else:
            try:
                hash(v)
            except TypeError as exc:
                raise Uncompilable(f"input {i} is a {type(v).__name__}, which is not hashable") from exc
            key.append(("c", type(v).__name__, v))
    return dynamic, tuple(key)


class SegmentProgram:
    """A segment's compiled variants (Note [Symbolic sizes])."""

    def __init__(self, segment: Segment, pipeline: Pipeline, root: torch.nn.Module, label: str) -> None:
        self.segment = segment
        self.pipeline = pipeline
        self.functional_pipeline = for_functional_graphs(pipeline)
        self.root = root
        self.label = label
        self.variants: dict[Hashable, list[Variant]] = {}
        self.compiles = 0
        #: why the segment runs node by node, if it does
        self.eager_reason: str | None = None
        #: why the segment was compiled for static sizes (a stage rejected symbolic ones), if it was
        self.specialized: str | None = None
        self._last: LastVariant | None = None  # Note [The last variant first]
        self._hit = False  # whether the latest call ran ``_last``'s variant by its check
        #: per key, the dynamic inputs' signatures of the calls that compiled a variant
        self._seen: dict[Hashable, list[tuple[Any, ...]]] = {}

    @property
    def graphs(self) -> tuple[StageGraph, ...]:
        """The graphs after each stage of the most recent variant."""
        latest = [v for vs in self.variants.values() for v in vs]
        return latest[-1].graphs if latest else ()

    def __call__(self, values: list[Any], owned: bool = False) -> list[Any]:
        """The segment's outputs from its inputs' values (``owned``: the
        caller gives ``values`` away, Note [Inputs freed early])."""
        last = self._last
        self._hit = last is not None and last.holds(values)
        if self._hit:  # Note [The last variant first]
            assert last is not None
            variant = last.variant
            below = last.below
            dynamic = list(last.dynamic(values))
            if owned and below is not None and last.fresh is not None:  # nothing reads ``values`` after this
                values.clear()
            call = variant.taking or variant.compiled
            if below and unobserved():  # Note [Below autograd]
                with GUARD():
                    outs = call(dynamic)
                return [None if k is None else outs[k] for k in variant.outputs]
            outs = call(dynamic)
            result = [None if k is None else outs[k] for k in variant.outputs]
            if below is None:  # decided once per check, from a call run the ordinary way
                last.fresh, separate_outputs = separate(values, result)
                last.below = variant.functional and separate_outputs
            return result
        if self.eager_reason is None:
            try:
                positions, key = _split(values)
                dynamic = [values[i] for i in positions]
                variants = self.variants.setdefault(key, [])
                variant = next((v for v in variants if v.holds(dynamic)), None)
                if variant is None:
                    seen = self._seen.setdefault(key, [])  # Note [Only changed sizes symbolic]
                    variant = self._compile(values, positions, first=not variants, seen=seen)
                    seen.append(_signature(dynamic))
                    variants.append(variant)
                self._remember(values, positions, variant)
                outs = (variant.taking or variant.compiled)(dynamic)
                return [None if k is None else outs[k] for k in variant.outputs]
            except Uncompilable as exc:
                self.eager_reason = str(exc)
                warnings.warn(
                    f"conveyor stage {STAGE!r}: {self.label} runs eagerly, node by node: {exc}",
                    RuntimeWarning,
                    stacklevel=2,
                )
        return self._run_eagerly(values)

    def fresh(self, values: Sequence[Any], outs: Sequence[Any]) -> list[bool]:
        """:func:`fresh_outputs` of the latest call's ``values`` and ``outs``,
        scanned once per check of Note [The last variant first]."""
        last = self._last
        if not self._hit or last is None:
            return fresh_outputs(values, outs)
        if last.fresh is None:
            last.fresh = fresh_outputs(values, outs)
        return last.fresh

    def _remember(self, values: Sequence[Any], positions: list[int], variant: Variant) -> None:
        """Check ``variant`` first on the next call (static variants only:
        Note [The last variant first])."""
        self._last = None
        if variant.static is not None:
            try:
                self._last = LastVariant(values, positions, variant, variant.keyed)
            except TypeError:  # a tensor subclass: the general way every call
                pass

    def _run_eagerly(self, values: Sequence[Any]) -> list[Any]:
        env: dict[torch.fx.Node, Any] = dict(zip(self.segment.inputs, values, strict=True))
        for node in self.segment.nodes:
            env[node] = run_node(node, env, self.root)
        return [env[n] for n in self.segment.outputs]

    def _compile(
        self, values: Sequence[Any], positions: list[int], first: bool, seen: Sequence[tuple[Any, ...]] = ()
    ) -> Variant:
        with _disable_current_modes():  # a user's dispatch mode (a profiler, a counter) must not see the compile
            return self._compile_checked(values, positions, first, seen)

    def _compile_checked(
        self, values: Sequence[Any], positions: list[int], first: bool, seen: Sequence[tuple[Any, ...]] = ()
    ) -> Variant:
        dynamic = getattr(self.pipeline.config, "dynamic", None)
        if dynamic is False or (dynamic is None and first):  # Note [Symbolic sizes]: static first
            return self._compile_as(values, positions, symbolic=False)
        if dynamic is True:
            seen = ()  # every size symbolic
        try:
            return self._compile_as(values, positions, symbolic=True, seen=seen)
        except Uncompilable as exc:
            symbolic_failure = exc
        try:
            variant = self._compile_as(values, positions, symbolic=False)
        except Uncompilable as exc:
            raise Uncompilable(f"{exc} (with symbolic sizes: {symbolic_failure})") from exc
        self.specialized = str(symbolic_failure)
        return variant

    def _compile_as(
        self, values: Sequence[Any], positions: list[int], symbolic: bool, seen: Sequence[tuple[Any, ...]] = ()
    ) -> Variant:
        fake_mode = FakeTensorMode(shape_env=ShapeEnv() if symbolic else None)
        shape_env = fake_mode.shape_env
        memo: dict[int, Any] = {}
        fakes: list[Any] = []
        fixed: list[tuple[int, int, int]] = []
        for k, i in enumerate(positions):
            v = values[i]
            if isinstance(v, torch.Tensor):
                if id(v) not in memo:
                    if v.layout is not torch.strided:
                        raise Uncompilable(f"input {i} has layout {v.layout}")
                    if shape_env is None:
                        memo[id(v)] = fake_mode.from_tensor(v.detach(), static_shapes=True)
                    else:
                        dims = _changed_dims(v, [sig[k] for sig in seen])  # Note [Only changed sizes symbolic]
                        fixed += [(k, d, n) for d, n in enumerate(v.shape) if dims[d] is DimDynamic.STATIC]
                        context: Any = StatelessSymbolicContext(dynamic_sizes=dims, constraint_sizes=[None] * v.dim())  # type: ignore[arg-type]
                        memo[id(v)] = fake_mode.from_tensor(v.detach(), symbolic_context=context)
                fakes.append(memo[id(v)])
            elif shape_env is None or (seen and all(sig[k] == v for sig in seen)):
                fakes.append(v)  # an int every compiling call had: a constant, guarded by value
            else:
                fakes.append(shape_env.create_unspecified_symint_and_symbol(v, ConstantSource(f"{STAGE}_int{i}"), DimDynamic.DYNAMIC))
        dynamic_at = set(positions)
        constants = {i: v for i, v in enumerate(values) if i not in dynamic_at}
        segment = self.segment
        shape: dict[str, tuple[int | None, ...]] = {}

        def program(*flat: Any) -> tuple[Any, ...]:
            env: dict[torch.fx.Node, Any] = {}
            it = iter(flat)
            for i, node in enumerate(segment.inputs):
                env[node] = constants[i] if i in constants else next(it)
            for node in segment.nodes:
                env[node] = run_node(node, env, self.root)
            outs = [env[n] for n in segment.outputs]
            tensors: list[torch.Tensor] = []
            where: list[int | None] = []
            for n, o in zip(segment.outputs, outs, strict=True):
                if o is None:
                    where.append(None)
                elif isinstance(o, torch.Tensor):
                    where.append(len(tensors))
                    tensors.append(o)
                else:
                    raise Uncompilable(f"{n.name} is a {type(o).__name__}, not a tensor")
            shape["outputs"] = tuple(where)
            return tuple(tensors)

        try:
            with torch.no_grad():
                gm = retrace(program, fakes, fake_mode)
            request = Request(gm, tuple(fakes), fake_mode, grad_enabled=False, label=self.label)
            functional = not any(writes(n) for n in gm.graph.nodes)
            if not functional:
                pipeline = self.pipeline
            else:
                pipeline = self.functional_pipeline
                simplify(gm)  # Note [Simplified segments]
            compiled, graphs = pipeline.compile(request)
            code = shape_env.produce_guards_expression(fakes) if shape_env is not None else None
        except Uncompilable:
            raise
        except Exception as exc:  # an op or layout the trace or a stage does not support
            raise Uncompilable(f"{type(exc).__name__}: {exc}") from exc
        self.compiles += 1
        guards = compile(code, f"<{STAGE} guards>", "eval") if code else None
        dynamic = [values[i] for i in positions]
        keyed = tuple(s for s in pipeline.stages if s.cache_key is not None)
        static = None if symbolic else _signature(dynamic)
        return Variant(
            compiled, guards, shape["outputs"], graphs, keyed, _stage_keys(keyed, dynamic), static, functional, tuple(fixed), _taking(compiled)
        )


def _taking(compiled: Any) -> Callable[[list[Any]], Sequence[Any]] | None:
    """Note [Inputs freed early]: a segment's inputs are the lifted saved
    tensors, which nothing but the run time holds once torch's engine has
    handed them over; the caller's list and the compiled callable's
    arguments kept all of them alive until the segment returned, where
    eager's engine frees each node's saved tensors after the node. So the
    generated caller gives the segment a list of its inputs that it holds
    nowhere else, the segment clears it once its check has read it (on the
    fast path of Note [The last variant first], where nothing reads the
    values after the call), and the compiled callable is the backend's
    variant that takes its list and frees each input at its last reader
    (the eager backend's ``boxed()``: Note [Inputs freed at their last use]
    in ``conveyor.protocol.backends.direct_calls``), where the backend
    offers one. The same ops run on the same values; the memory a freed
    input held is reused by the ops after it (about 2% of the benchmark's
    backward on a loaded machine)."""
    boxed = getattr(compiled, "boxed", None)
    taking = boxed() if callable(boxed) else None
    return taking if callable(taking) else None


def _changed_dims(v: torch.Tensor, before: Sequence[Any]) -> list[DimDynamic]:
    """Note [Only changed sizes symbolic]: a symbolic variant makes symbols
    of the sizes that differ between the calls that compiled a variant so
    far and this one (the batch, the sequence length), not of every size: each symbol costs the shape environment's
    reasoning at every op of the trace (a two-layer encoder's backward took
    20 s with every size a symbol), and a size every call so far had is most
    likely a model dimension. A size kept static is a guard by value (the
    shape environment's guards check every size, symbolic or not), so a call
    where it differs compiles another variant, with that size symbolic too
    (the calls that compiled include the earlier symbolic variants', so the
    symbolic sizes only grow: at most one compile per size). ``before``: the
    tensor's ``(shape, stride, offset)`` in each of those calls; with none,
    or another number of dimensions, every size is a symbol."""
    shapes = [b[0] for b in before if isinstance(b, tuple) and len(b[0]) == v.dim()]
    if not shapes or len(shapes) != len(before):
        return [DimDynamic.DYNAMIC] * v.dim()
    return [
        DimDynamic.STATIC if all(shape[d] == size for shape in shapes) else DimDynamic.DYNAMIC
        for d, size in enumerate(v.shape)
    ]
