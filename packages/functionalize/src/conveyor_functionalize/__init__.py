"""conveyor-functionalize: the stage that hands inner stages a purely
functional graph and replays mutations and output aliases at run time.

Public API: :func:`analyze` and the metadata it returns (:class:`ProgramMeta`,
:class:`InputInfo`, :class:`OutputInfo`, :class:`OutputKind`), which live in
the core's program record (``conveyor.analysis.program_meta``) and are re-exported
here under their old names. A stage reads them from ``request.program.meta``.
"""

from collections.abc import Sequence
from typing import Any

import torch.fx
from conveyor.stage_api import (
    BaseIdx,
    InputIdx,
    InputInfo,
    OutputIdx,
    OutputInfo,
    OutputKind,
    Program,
    ProgramMeta,
)

from conveyor_functionalize.__about__ import __version__
from conveyor_functionalize.overlapping import check_no_mutated_aliases

__all__ = [
    "BaseIdx",
    "InputIdx",
    "InputInfo",
    "OutputIdx",
    "OutputInfo",
    "OutputKind",
    "ProgramMeta",
    "__version__",
    "analyze",
]


def analyze(graph: torch.fx.GraphModule, inputs: Sequence[Any], fake_mode: Any) -> ProgramMeta:
    """:class:`ProgramMeta` of ``graph`` called on ``inputs`` (fake values
    of ``fake_mode``), under the current grad mode: the program record's
    exact part (``conveyor.analysis.program.Program.meta``).

    :raises StageError: when inputs that overlap are mutated (that needs the
        ``dedupe`` / ``synthetic_base`` stages first).
    """
    program = Program(graph, tuple(inputs), fake_mode, torch.is_grad_enabled())
    check_no_mutated_aliases(program)
    return program.meta

