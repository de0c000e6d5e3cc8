"""conveyor: an ahead-of-time compiler pipeline for PyTorch, built from stages."""

from conveyor.__about__ import __version__
from conveyor.analysis.grad_regions import call_graph
from conveyor.compiled import Compiled, compile, last_graphs
from conveyor.errors import (
    CaptureError,
    ConfigError,
    ConveyorError,
    DataDependentError,
    PipelineError,
    StageError,
    SymbolicSizesUnsupported,
)
from conveyor.frontend.capture import retrace
from conveyor.protocol.config import Config, resolve
from conveyor.protocol.hookspecs import hookimpl
from conveyor.protocol.pipeline import Pipeline
from conveyor.protocol.plugins import Plugins
from conveyor.protocol.stage import CompiledFn, Lowering, Request, StageSpec
from conveyor.protocol.stamps import StageGraph, stamp

__all__ = [
    "CaptureError",
    "Compiled",
    "CompiledFn",
    "Config",
    "ConfigError",
    "ConveyorError",
    "DataDependentError",
    "Lowering",
    "Pipeline",
    "PipelineError",
    "Plugins",
    "Request",
    "StageError",
    "StageGraph",
    "StageSpec",
    "SymbolicSizesUnsupported",
    "__version__",
    "call_graph",
    "compile",
    "hookimpl",
    "last_graphs",
    "resolve",
    "retrace",
    "stamp",
]
