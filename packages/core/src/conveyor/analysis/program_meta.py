"""What a program does to its inputs and how its outputs alias: ``ProgramMeta``.

The exact part of the program record (``conveyor.analysis.program.Program.meta``),
computed by one functional run (``conveyor.analysis.functional_analysis``). Field
names are a stable API: stages read them (``conveyor_functionalize``
re-exports them under its old names).

Index spaces (Note [Program index spaces]):

* :data:`InputIdx`: a flat input of the program, in placeholder order (the
  functionalize stage does not change the inputs, so its outer and inner
  inputs share it).
* :data:`OutputIdx`: a user output, in the order of the program's output tuple
  (the outer calling convention).
* :data:`BaseIdx`: an intermediate base the inner graph returns so that
  several outputs viewing it can share it again at run time.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import NewType, cast

InputIdx = NewType("InputIdx", int)
OutputIdx = NewType("OutputIdx", int)
BaseIdx = NewType("BaseIdx", int)


@dataclass(frozen=True)
class InputInfo:
    """What the program does to one flat input.

    :ivar mutates_data: the input's values are written (``add_``, ``copy_``,
        ``out=``, a write through a view of it, ...).
    :ivar mutates_metadata: its sizes, strides or storage offset change
        (``t_``, ``transpose_``, ``unsqueeze_``, ``squeeze_``,
        ``as_strided_``, ...), and differ at the end of the program.
        A storage swap counts as a metadata mutation too.
    :ivar mutates_storage: ``set_`` made it point at another storage.
        When true, ``mutates_data`` is false: the swap replaces the data.
    :ivar mutations_under_no_grad: every data mutation ran under
        ``torch.no_grad()`` (or inference mode), so eager records no
        autograd history for it (``BatchNorm`` running statistics).
    :ivar mutations_hidden_from_autograd: every mutation was hidden from
        autograd by functionalization's own rules (e.g. metadata-only
        mutations, ``.data``-style updates).
    :ivar swapped_onto: for a storage swap onto another input's storage
        (``x.set_(y)``), that input (:data:`InputIdx`), else ``None``.
    :ivar requires_grad: the input requires grad.
    :ivar is_leaf: the input is an autograd leaf (an in-place write on a leaf
        that requires grad is an error in eager, and here).
    """

    mutates_data: bool = False
    mutates_metadata: bool = False
    mutates_storage: bool = False
    mutations_under_no_grad: bool = False
    mutations_hidden_from_autograd: bool = False
    swapped_onto: int | None = None
    requires_grad: bool = False
    is_leaf: bool = True

    def __post_init__(self) -> None:
        if self.mutates_storage and not self.mutates_metadata:
            raise ValueError("InputInfo: a storage swap (set_) is a metadata mutation too")
        if self.mutates_storage and self.mutates_data:
            raise ValueError("InputInfo: a storage swap replaces the data; mutates_data must be false")
        if self.swapped_onto is not None and not self.mutates_storage:
            raise ValueError("InputInfo: swapped_onto is only for a storage swap")

    @property
    def mutated(self) -> bool:
        """Data, metadata or storage of the input changes."""
        return self.mutates_data or self.mutates_metadata


class OutputKind(StrEnum):
    """How one user output relates to the inputs and the other outputs."""

    #: a new tensor that aliases nothing the caller can see
    FRESH = "fresh"
    #: the very input object ``index`` (returned as that object)
    IS_INPUT = "is_input"
    #: shares storage with input ``index``; regenerated from the real input
    VIEW_OF_INPUT = "view_of_input"
    #: the only output viewing an intermediate; the backend computes it
    VIEW_OF_INTERMEDIATE = "view_of_intermediate"
    #: one of several outputs viewing intermediate base ``index``
    VIEW_OF_SHARED_INTERMEDIATE = "view_of_shared_intermediate"
    #: the very object of an earlier output ``index``
    IS_OUTPUT = "is_output"
    #: shares storage with output ``index`` (a fresh output), e.g. a view of it
    ALIAS_OF_OUTPUT = "alias_of_output"


_INDEXED = {
    OutputKind.IS_INPUT,
    OutputKind.VIEW_OF_INPUT,
    OutputKind.VIEW_OF_SHARED_INTERMEDIATE,
    OutputKind.IS_OUTPUT,
    OutputKind.ALIAS_OF_OUTPUT,
}


@dataclass(frozen=True)
class OutputInfo:
    """How one user output aliases.

    :ivar kind: see :class:`OutputKind`.
    :ivar index: the input (:data:`InputIdx`), base (:data:`BaseIdx`) or
        output (:data:`OutputIdx`) it aliases, per ``kind``; ``None`` for
        ``FRESH`` and ``VIEW_OF_INTERMEDIATE``.
    :ivar requires_grad: whether eager's output requires grad.
    :ivar is_tensor: false for non-tensor outputs (SymInts under dynamo).
    """

    kind: OutputKind
    index: int | None = None
    requires_grad: bool = False
    is_tensor: bool = True

    def __post_init__(self) -> None:
        if (self.kind in _INDEXED) != (self.index is not None):
            raise ValueError(f"OutputInfo: kind {self.kind.value} {'needs' if self.kind in _INDEXED else 'takes no'} index")
        if not self.is_tensor and self.kind is not OutputKind.FRESH:
            raise ValueError("OutputInfo: a non-tensor output can only be fresh")

    @property
    def computed(self) -> bool:
        """The backend computes this output (it is not regenerated from an
        input, a base or another output)."""
        return self.kind in (OutputKind.FRESH, OutputKind.VIEW_OF_INTERMEDIATE)


@dataclass(frozen=True)
class ProgramMeta:
    """Per input and per output facts of one program.

    :ivar inputs: one :class:`InputInfo` per flat input (:data:`InputIdx`).
    :ivar outputs: one :class:`OutputInfo` per user output (:data:`OutputIdx`).
    :ivar num_intermediate_bases: how many intermediate bases
        ``VIEW_OF_SHARED_INTERMEDIATE`` outputs refer to.
    """

    inputs: tuple[InputInfo, ...]
    outputs: tuple[OutputInfo, ...]
    num_intermediate_bases: int = 0

    def __post_init__(self) -> None:
        bases = {cast(int, o.index) for o in self.outputs if o.kind is OutputKind.VIEW_OF_SHARED_INTERMEDIATE}
        if bases != set(range(self.num_intermediate_bases)):
            raise ValueError(f"ProgramMeta: outputs use bases {sorted(bases)} of {self.num_intermediate_bases}")
        for k, o in enumerate(self.outputs):
            index = cast(int, o.index)  # only read for indexed kinds, where it is set
            if o.kind in (OutputKind.IS_INPUT, OutputKind.VIEW_OF_INPUT) and not 0 <= index < len(self.inputs):
                raise ValueError(f"ProgramMeta: output {k} aliases input {o.index}, out of range")
            if o.kind is OutputKind.IS_OUTPUT and not 0 <= index < k:
                raise ValueError(f"ProgramMeta: output {k} is output {o.index}, which is not an earlier one")
            if o.kind is OutputKind.ALIAS_OF_OUTPUT and (index == k or not self.outputs[index].computed):
                raise ValueError(f"ProgramMeta: output {k} aliases output {o.index}, which is not computed")

    @property
    def mutated_inputs(self) -> tuple[InputIdx, ...]:
        """Inputs whose data, metadata or storage the program changes."""
        return tuple(InputIdx(i) for i, info in enumerate(self.inputs) if info.mutated)

    @property
    def data_mutated_inputs(self) -> tuple[InputIdx, ...]:
        return tuple(InputIdx(i) for i, info in enumerate(self.inputs) if info.mutates_data)

    @property
    def metadata_mutated_inputs(self) -> tuple[InputIdx, ...]:
        return tuple(InputIdx(i) for i, info in enumerate(self.inputs) if info.mutates_metadata)

    @property
    def is_functional(self) -> bool:
        """No input is mutated and no output aliases an input or another output."""
        return not self.mutated_inputs and all(o.computed for o in self.outputs)
