"""Inputs that overlap and are mutated: functionalize needs them merged first."""

from __future__ import annotations

from conveyor import StageError
from conveyor.stage_api import Program

STAGE = "functionalize"


def check_no_mutated_aliases(program: Program) -> None:
    """Functionalization treats each input as its own tensor: a write to one of
    two inputs that overlap would not reach the other. Inputs that share a
    storage without a common byte are independent, whatever is mutated.

    :raises StageError: when two overlapping inputs exist and one of them has
        its data mutated (that needs the ``dedupe`` / ``synthetic_base``
        stages first).
    """
    infos = program.meta.inputs
    for j, i in sorted(program.aliasing.overlapping):
        if infos[i].mutates_data or infos[j].mutates_data:
            raise StageError(
                STAGE,
                f"inputs {j} and {i} overlap in memory and one of them has its data mutated; functionalize "
                "needs them merged first: enable the 'dedupe' and 'synthetic_base' stages",
            )
