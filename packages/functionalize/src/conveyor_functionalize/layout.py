"""The inner graph's outputs, by name: ``FunctionalLayout``.

The functional graph the stage hands inner stages returns, in this order:

* ``updated_inputs``: the new value of each input whose data is written or
  whose storage is swapped (the epilogue copies / ``set_``s it into the
  caller's input);
* ``computed_outputs``: the user outputs the backend computes (fresh ones and
  lone views of intermediates);
* ``intermediate_bases``: one base per group of outputs that view the same
  intermediate (the epilogue regenerates those outputs from it).

It is the one mapping between the user's outputs (:data:`OutputIdx`) and the
inner graph's outputs (:data:`InnerOutIdx`); nothing else computes positions.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NewType

from conveyor.stage_api import BaseIdx, InputIdx, OutputIdx, OutputKind, ProgramMeta

InnerOutIdx = NewType("InnerOutIdx", int)


@dataclass(frozen=True)
class FunctionalLayout:
    """Which inner graph output holds what.

    :ivar updated_inputs: inputs whose new value the inner graph returns.
    :ivar computed_outputs: user outputs the inner graph computes.
    :ivar intermediate_bases: per :data:`BaseIdx`, a user output whose
        ``_base`` is that intermediate (the trace returns that ``_base``).
    """

    updated_inputs: tuple[InputIdx, ...]
    computed_outputs: tuple[OutputIdx, ...]
    intermediate_bases: tuple[OutputIdx, ...]

    def __post_init__(self) -> None:
        for name in ("updated_inputs", "computed_outputs", "intermediate_bases"):
            value = getattr(self, name)
            if len(set(value)) != len(value):
                raise ValueError(f"FunctionalLayout: {name} has duplicates: {value}")

    @staticmethod
    def of(meta: ProgramMeta) -> FunctionalLayout:
        """The layout for a program's metadata. (An input ``set_`` onto
        another input's storage needs no new value: the epilogue swaps it onto
        the caller's real input.)"""
        updated = tuple(
            InputIdx(i)
            for i, info in enumerate(meta.inputs)
            if info.mutates_data or (info.mutates_storage and info.swapped_onto is None)
        )
        computed = tuple(OutputIdx(k) for k, o in enumerate(meta.outputs) if o.computed)
        first_of_base: dict[int, OutputIdx] = {}
        for k, o in enumerate(meta.outputs):
            if o.kind is OutputKind.VIEW_OF_SHARED_INTERMEDIATE:
                assert o.index is not None  # indexed kind (OutputInfo.__post_init__)
                first_of_base.setdefault(o.index, OutputIdx(k))
        bases = tuple(first_of_base[b] for b in range(meta.num_intermediate_bases))
        return FunctionalLayout(updated, computed, bases)

    @property
    def num_outputs(self) -> int:
        return len(self.updated_inputs) + len(self.computed_outputs) + len(self.intermediate_bases)

    def updated_input_slot(self, i: InputIdx) -> InnerOutIdx:
        return InnerOutIdx(self.updated_inputs.index(i))

    def output_slot(self, k: OutputIdx) -> InnerOutIdx:
        return InnerOutIdx(len(self.updated_inputs) + self.computed_outputs.index(k))

    def base_slot(self, b: BaseIdx) -> InnerOutIdx:
        return InnerOutIdx(len(self.updated_inputs) + len(self.computed_outputs) + b)
