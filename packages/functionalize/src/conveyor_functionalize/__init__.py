"""conveyor-functionalize: the stage that hands inner stages a purely
functional graph and replays mutations and output aliases at run time.

Public API: :func:`analyze` and the metadata it returns (:class:`ProgramMeta`,
:class:`InputInfo`, :class:`OutputInfo`, :class:`OutputKind`).
"""

from conveyor_functionalize.__about__ import __version__
from conveyor_functionalize.analysis import analyze
from conveyor_functionalize.meta import (
    BaseIdx,
    InputIdx,
    InputInfo,
    OutputIdx,
    OutputInfo,
    OutputKind,
    ProgramMeta,
)

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
