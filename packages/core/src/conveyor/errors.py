"""The errors conveyor raises. Every message names the stage (or config key) and the cause."""

from __future__ import annotations


class ConveyorError(Exception):
    """Base class of every error conveyor raises on purpose."""


class PipelineError(ConveyorError):
    """The pipeline cannot be built: a cycle, a missing requirement, an unknown
    stage name or option, no backend or several. Raised at pipeline build time."""


class ConfigError(PipelineError):
    """A configuration key, stage name or option value is not valid."""


class StageError(ConveyorError, RuntimeError):
    """A stage failed while compiling; the message names the stage and the cause.

    A ``RuntimeError`` too, so code that expects what eager raises (e.g. an
    in-place op on a leaf that requires grad) still catches it."""

    def __init__(self, stage: str, cause: str) -> None:
        super().__init__(f"conveyor stage {stage!r}: {cause}")
        self.stage = stage
        self.cause = cause


class SymbolicSizesUnsupported(StageError):
    """A stage cannot take this program's symbolic sizes: the call compiles
    again with static sizes, with a warning that names the stage (Note
    [Refusing symbolic sizes])."""


def refuses_symbols(exc: StageError) -> bool:
    """Note [Refusing symbolic sizes]: a stage that cannot take a program's
    symbolic sizes says so with :class:`SymbolicSizesUnsupported` (or
    Python's ``NotImplementedError``, which the pipeline wraps); the call
    then compiles with static sizes, with a warning naming the stage. A
    capture that fails under symbolic sizes (a ``CaptureError``: a limit of
    torch's tracing) does the same. Any other failure of a stage propagates:
    a stage's bug is never hidden behind a static compile."""
    return isinstance(exc, SymbolicSizesUnsupported) or isinstance(exc.__cause__, NotImplementedError)


class CaptureError(ConveyorError):
    """The standalone capture (make_fx) could not trace the user's function."""


class DataDependentError(CaptureError):
    """A trace needed a size or a branch that only the tensors' values decide
    (``nonzero``, ``.item()``, Python control flow on values)."""


class EagerFallback(ConveyorError):
    """Raised inside a capture that must not go on; the caller runs eagerly."""


class DynamoSplits(EagerFallback):
    """Raised inside a standalone capture of a program that dynamo can split
    where one graph cannot hold it; ``conveyor.compile`` compiles it through
    dynamo instead (Note [Programs only dynamo can split] in
    ``conveyor.runtime.specialize``). Elsewhere it is an eager fallback."""
