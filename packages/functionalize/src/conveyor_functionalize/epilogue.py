"""The run-time half: write mutations back, regenerate aliased outputs.

Everything is decided at compile time into an :class:`EpiloguePlan` (tuples of
small frozen records, concrete sizes and strides); the per-call path only
indexes lists and calls the few tensor methods it must.

Order (as in AOTAutograd's runtime wrapper): storage swaps (``set_``), then
metadata (``as_strided_``), then data (``copy_``), on the caller's own input
objects; a swap onto another input's storage comes last, after that input's
own writes. Then the outputs: computed ones come from the inner callable;
outputs that are an input are that very object; views of an input, of a
shared intermediate base or of another output are rebuilt from the real
tensor they view (``conveyor_functionalize.views``), after the mutations, so
they see the caller's storage exactly as eager's outputs do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from enum import Enum
from typing import Any, cast

import torch
from conveyor.stage_api import (
    BaseIdx,
    CompiledFn,
    FunctionalRun,
    InputIdx,
    OutputIdx,
    OutputKind,
    ProgramMeta,
    overlaps_itself,
    reducible,
    span,
)

from conveyor_functionalize.layout import FunctionalLayout, InnerOutIdx
from conveyor_functionalize.views import Geometry, ViewRecipe, concrete, replayed_geometry


@dataclass(frozen=True)
class Mutation:
    """How to write one input's mutation back into the caller's tensor.

    :ivar input: the input.
    :ivar slot: the inner output holding its new value (data or storage
        mutations), else ``None``.
    :ivar swap_storage: ``set_`` the input to the new value.
    :ivar geometry: new sizes, strides, offset for ``as_strided_`` (metadata
        mutations), else ``None``.
    :ivar copy_data: ``copy_`` the new value in.
    :ivar no_grad: copy the data under ``no_grad`` (eager recorded no history).
    :ivar metadata_grad: record the metadata change in autograd (eager does
        for a non-leaf that requires grad: ``t_()`` gives it a ``TBackward``).
    :ivar storage_of: for a storage swap onto another input's storage
        (``x.set_(y)``), that input: the swap is done last, onto the caller's
        real ``y``, so the two share storage as in eager.
    :ivar clone_first: hand the inner callable a clone of this input: what it
        saves for backward must not be the tensor the epilogue then writes
        into, re-strides or swaps (each bumps its version; eager's in-place
        ops save what they need themselves).
    """

    input: InputIdx
    slot: InnerOutIdx | None
    swap_storage: bool
    geometry: Geometry | None
    copy_data: bool
    no_grad: bool
    metadata_grad: bool
    clone_first: bool
    storage_of: InputIdx | None = None

    def __post_init__(self) -> None:
        new_value = self.copy_data or (self.swap_storage and self.storage_of is None)
        if new_value != (self.slot is not None):
            raise ValueError(f"Mutation of input {self.input}: a new value slot iff data or storage changes")
        if self.storage_of is not None and (not self.swap_storage or self.geometry is None):
            raise ValueError(f"Mutation of input {self.input}: a swap onto input {self.storage_of} needs its geometry")
        if self.swap_storage and self.copy_data:
            raise ValueError(f"Mutation of input {self.input}: a storage swap already replaces the data")


class Source(Enum):
    """Where a user output comes from at run time."""

    INNER = "inner"  # inner output ``index``
    INNER_LEAF = "inner_leaf"  # inner output ``index``, a leaf that requires grad (Note [Views taken under no_grad])
    INPUT = "input"  # the caller's input ``index`` itself
    INPUT_VIEW = "input_view"  # a view of input ``index``
    BASE_VIEW = "base_view"  # a view of the intermediate base in inner output ``index``
    OUTPUT = "output"  # the very object of user output ``index``
    OUTPUT_VIEW = "output_view"  # a view of user output ``index``


_VIEWS = (Source.INPUT_VIEW, Source.BASE_VIEW, Source.OUTPUT_VIEW)


@dataclass(frozen=True)
class OutputRecipe:
    """How to produce one user output.

    :ivar source: see :class:`Source`.
    :ivar index: inner output, input or user output, per ``source``.
    :ivar view: for views, how to rebuild it from what it views.
    :ivar strides: for an inner output, eager's strides where the
        functional graph lays it out otherwise (Note [Outputs written into
        gapped buffers]), else ``None``.
    """

    source: Source
    index: int
    view: ViewRecipe | None = None
    strides: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if (self.source in _VIEWS) != (self.view is not None):
            raise ValueError(f"OutputRecipe: {self.source.value} {'needs' if self.source in _VIEWS else 'takes no'} view")
        if self.strides is not None and self.source is not Source.INNER:
            raise ValueError(f"OutputRecipe: {self.source.value} takes no strides")


@dataclass(frozen=True)
class EpiloguePlan:
    """Everything the run-time wrapper does, decided at compile time.

    :ivar mutations: one per mutated input.
    :ivar outputs: one per user output.
    :ivar num_inner_outputs: how many outputs the inner callable returns.
    """

    mutations: tuple[Mutation, ...]
    outputs: tuple[OutputRecipe, ...]
    num_inner_outputs: int

    @property
    def is_identity(self) -> bool:
        """Nothing to write back and the inner outputs are the user outputs."""
        return (
            not self.mutations
            and self.num_inner_outputs == len(self.outputs)
            and all(r.source is Source.INNER and r.index == k and r.strides is None for k, r in enumerate(self.outputs))
        )

    @staticmethod
    def build(
        meta: ProgramMeta,
        run: FunctionalRun,
        layout: FunctionalLayout,
        inputs: Sequence[Any],
        grad_enabled: bool,
        no_grad_views: frozenset[int] = frozenset(),
    ) -> EpiloguePlan:
        """:param no_grad_views: outputs eager took as views under ``no_grad``
        (Note [Views taken under no_grad])."""
        records_grad = grad_enabled and any(info.requires_grad for info in meta.inputs)
        mutations = tuple(
            _mutation(InputIdx(i), meta, run, layout, records_grad, inputs[i])
            for i, info in enumerate(meta.inputs)
            if info.mutated
        )
        outputs = tuple(
            _recipe(OutputIdx(k), meta, run, layout, inputs, k in no_grad_views) for k in range(len(meta.outputs))
        )
        return EpiloguePlan(mutations, outputs, layout.num_outputs)

    def with_eager_strides(self, eager: Sequence[Any], functional: Sequence[Any]) -> EpiloguePlan:
        """The plan with eager's strides for each inner output the
        functional graph lays out otherwise, where eager's layout is one
        the functional graph cannot give (Note [Outputs written into gapped
        buffers]). ``eager``: the captured graph's output values, per user
        output; ``functional``: the functional graph's, per inner output."""
        if len(eager) != len(self.outputs):
            return self
        outputs = tuple(
            replace(r, strides=_gapped_strides(eager[k], functional[r.index])) if r.source is Source.INNER else r
            for k, r in enumerate(self.outputs)
        )
        return self if outputs == self.outputs else replace(self, outputs=outputs)

    def wrap(self, inner: CompiledFn) -> CompiledFn:
        """The stage's compiled callable around the inner one (the inner one
        itself when there is nothing to do)."""
        return inner if self.is_identity else _runtime(self, inner)


def _mutation(
    i: InputIdx, meta: ProgramMeta, run: FunctionalRun, layout: FunctionalLayout, records_grad: bool, entry: Any
) -> Mutation:
    info = meta.inputs[i]
    f_input = run.f_inputs[i]
    storage_of = None if info.swapped_onto is None else InputIdx(info.swapped_onto)
    geometry = None
    if info.mutates_metadata and (not info.mutates_storage or storage_of is not None):
        after = torch._from_functional_tensor(f_input.elem)
        geometry = concrete(after, f"input {i} (its metadata is mutated)")
        replayed = None if info.mutates_storage else replayed_geometry(f_input, entry)
        if replayed is not None and replayed[0] == geometry[0]:
            geometry = replayed  # eager's strides and offset (Note [View replay])
    slot = layout.updated_input_slot(i) if i in layout.updated_inputs else None
    no_grad = info.mutations_under_no_grad or info.mutations_hidden_from_autograd or not f_input.requires_grad
    metadata_grad = records_grad and info.requires_grad and not info.is_leaf
    clone_first = records_grad and info.mutated  # set_, as_strided_ and copy_ all bump the version
    return Mutation(
        i, slot, info.mutates_storage, geometry, info.mutates_data, no_grad, metadata_grad, clone_first, storage_of
    )


def _recipe(
    k: OutputIdx, meta: ProgramMeta, run: FunctionalRun, layout: FunctionalLayout, inputs: Sequence[Any], no_grad: bool
) -> OutputRecipe:
    info = meta.outputs[k]
    out = run.f_outputs[k]
    what = f"output {k}"
    rg = info.requires_grad
    match info.kind:
        case OutputKind.FRESH | OutputKind.VIEW_OF_INTERMEDIATE if no_grad:
            return OutputRecipe(Source.INNER_LEAF, layout.output_slot(k))
        case OutputKind.FRESH | OutputKind.VIEW_OF_INTERMEDIATE:
            return OutputRecipe(Source.INNER, layout.output_slot(k))
        case OutputKind.IS_INPUT:
            assert info.index is not None  # indexed kind (OutputInfo.__post_init__)
            return OutputRecipe(Source.INPUT, info.index)
        case OutputKind.IS_OUTPUT:
            assert info.index is not None  # indexed kind (OutputInfo.__post_init__)
            return OutputRecipe(Source.OUTPUT, info.index)
        case OutputKind.VIEW_OF_INPUT:
            assert info.index is not None  # indexed kind (OutputInfo.__post_init__)
            replay = not meta.inputs[info.index].mutates_metadata  # Note [View replay]
            view = ViewRecipe.of(out, inputs[info.index], what, requires_grad=rg, may_replay=replay)
            return OutputRecipe(Source.INPUT_VIEW, info.index, view.taken_under_no_grad() if no_grad else view)
        case OutputKind.VIEW_OF_SHARED_INTERMEDIATE:
            assert info.index is not None  # indexed kind (OutputInfo.__post_init__)
            base = run.f_outputs[layout.intermediate_bases[info.index]]._base
            view = ViewRecipe.of(out, base, what, requires_grad=rg, may_replay=True)
            view = view.taken_under_no_grad() if no_grad else view
            return OutputRecipe(Source.BASE_VIEW, layout.base_slot(BaseIdx(info.index)), view)
        case OutputKind.ALIAS_OF_OUTPUT:
            assert info.index is not None  # indexed kind (OutputInfo.__post_init__)
            view = ViewRecipe.of(out, run.f_outputs[info.index], what, requires_grad=rg, may_replay=True)
            return OutputRecipe(Source.OUTPUT_VIEW, info.index, view.taken_under_no_grad() if no_grad else view)
    raise AssertionError(f"unhandled output kind {info.kind}")


def _gapped_strides(eager: Any, functional: Any) -> tuple[int, ...] | None:
    """Note [Outputs written into gapped buffers]: a program that writes a
    result into a buffer it made with gaps between its elements
    (``torch.empty_strided(x.size(), x.stride())`` of a sliced ``x``, then
    ``r[:] = ...`` or ``r.copy_(...)``) returns that buffer, gaps included;
    the functional graph computes the written value as a new tensor, which
    no functional op lays out with gaps (``copy``'s spelling keeps a dense
    ``self``'s memory order, Note in ``decompositions``). Such an output is
    copied into a buffer of eager's strides at run time: eager's strides
    when eager's value (the capture's) is fresh in a storage of its own
    (offset 0), does not overlap itself and is not dense, with concrete
    sizes, and the functional graph's differs."""
    if not (isinstance(eager, torch.Tensor) and isinstance(functional, torch.Tensor)):
        return None
    if eager.layout is not torch.strided or functional.layout is not torch.strided:
        return None
    try:
        size, strides = tuple(int(n) for n in eager.size()), tuple(int(st) for st in eager.stride())
        same = size == tuple(int(n) for n in functional.size()) and strides == tuple(int(st) for st in functional.stride())
        offset = int(eager.storage_offset())
    except (TypeError, ValueError, RuntimeError):  # symbolic: not handled
        return None
    if same or offset != 0 or overlaps_itself(eager):
        return None
    reach = span(size, strides)
    if reach == eager.numel() or eager.untyped_storage().nbytes() != reach * eager.element_size():
        return None  # dense, or not a buffer of its own: the functional layout stands
    return strides


def _grow_storage(x: torch.Tensor, sizes: tuple[int, ...], strides: tuple[int, ...], offset: int) -> None:
    """A resize (``resize_``, or an ``out=`` argument of the wrong size)
    can need more storage than the input has: grow it in place, as eager's
    resize does, before the input takes its new geometry."""
    if 0 in sizes:
        return
    need = (offset + span(sizes, strides)) * x.element_size()
    storage = x.untyped_storage()
    if storage.nbytes() < need:
        storage.resize_(need)


def _clone(x: torch.Tensor) -> torch.Tensor:
    """A copy of ``x`` with ``x``'s strides: the inner callable was traced
    with them, and ops lay out their results by them (``clone`` makes a
    non-dense or expanded tensor contiguous). Broadcast (stride-0) dims are
    broadcast again; elements that share memory otherwise keep ``clone``'s
    layout."""
    zero = [d for d in range(x.dim()) if x.stride(d) == 0 and x.size(d) > 1]
    one = x[tuple(slice(0, 1) if d in zero else slice(None) for d in range(x.dim()))] if zero else x
    copy = one.clone()
    if copy.stride() != one.stride() and not overlaps_itself(one):
        copy = torch.empty_strided(one.size(), one.stride(), dtype=one.dtype, device=one.device).copy_(one)
    return copy.expand(x.shape) if zero else copy


def _runtime(plan: EpiloguePlan, inner: CompiledFn) -> CompiledFn:
    mutations = plan.mutations
    recipes = plan.outputs
    n = len(recipes)
    needs_inputs = bool(mutations) or any(r.source in (Source.INPUT, Source.INPUT_VIEW) for r in recipes)
    # per-call lists, in epilogue order: swaps, metadata, data, swaps onto other inputs
    clone_first = [m.input for m in mutations if m.clone_first]
    swaps = [(m.input, cast(InnerOutIdx, m.slot)) for m in mutations if m.swap_storage and m.storage_of is None]
    restrides = [(m.input, *m.geometry, m.metadata_grad) for m in mutations if m.geometry is not None and not m.swap_storage]
    copies = [(m.input, cast(InnerOutIdx, m.slot), m.no_grad) for m in mutations if m.copy_data]
    swaps_onto = [(m.input, m.storage_of, *cast(Geometry, m.geometry)) for m in mutations if m.storage_of is not None]
    # computed outputs first: a view of an output may come before the output it views
    order = sorted(range(n), key=lambda k: recipes[k].source not in (Source.INNER, Source.INNER_LEAF))

    def run(args: list[Any]) -> Sequence[Any]:
        real = list(args) if needs_inputs else ()
        for i in clone_first:
            args[i] = _clone(args[i])
        inner_outs = inner(args)
        if swaps:
            with torch.no_grad():
                for i, slot in swaps:
                    real[i].set_(inner_outs[slot])
        for i, sizes, strides, offset, grad in restrides:
            x = real[i]
            _grow_storage(x, sizes, strides, offset)
            if x.requires_grad and not grad:
                with torch.no_grad():
                    x.as_strided_(sizes, strides, offset)
            else:
                x.as_strided_(sizes, strides, offset)
        for i, slot, no_grad in copies:
            x, new = real[i], inner_outs[slot]
            if no_grad and (x.requires_grad or new.requires_grad):
                with torch.no_grad():
                    x.copy_(new)
            else:
                x.copy_(new)
        if swaps_onto:
            with torch.no_grad():
                for i, j, sizes, strides, offset in swaps_onto:
                    real[i].set_(real[j].untyped_storage(), offset, sizes, strides)
        outs: list[Any] = [None] * n
        for k in order:
            r = recipes[k]
            source = r.source
            if source is Source.INNER:
                out = inner_outs[r.index]
                if r.strides is not None:  # Note [Outputs written into gapped buffers]
                    out = torch.empty_strided(out.size(), r.strides, dtype=out.dtype, device=out.device).copy_(out)
                outs[k] = out
            elif source is Source.INNER_LEAF:
                outs[k] = inner_outs[r.index].detach().requires_grad_()
            elif source is Source.INPUT:
                outs[k] = real[r.index]
            elif source is Source.OUTPUT:
                outs[k] = outs[r.index]
            elif source is Source.INPUT_VIEW:
                assert r.view is not None  # view sources carry one (OutputRecipe.__post_init__)
                outs[k] = r.view.regenerate(real[r.index])
            elif source is Source.BASE_VIEW:
                assert r.view is not None
                outs[k] = r.view.regenerate(inner_outs[r.index])
            else:
                assert r.view is not None
                outs[k] = r.view.regenerate(outs[r.index])
        return outs

    return reducible(run, _runtime, plan, inner)  # Note [Picklable run-time callables] in conveyor.protocol.artifacts

