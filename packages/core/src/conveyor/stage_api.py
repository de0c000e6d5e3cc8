"""What a stage package may use of the core: the declared stage API.

Note [The stage API]: a stage package (``conveyor_autograd``,
``conveyor_triton``, ...) imports the core only through this module and
``conveyor``'s public names, never a core module directly, so the core may
move its modules without breaking a stage, and a reader sees in one place
what stages rely on. ``tests/test_layers.py`` checks every stage package's
sources for it. The names, by what they are for:

* the protocol: the request a stage lowers, what it returns, its spec and
  errors, the plugin hook marker, stamping its graphs, tracing; a tool's
  spec (a package that is not a compile-time stage); an implementation
  imported when the stage first runs (``LazyImpl``);
* facts about ops (``conveyor.analysis.schema``): which ops view, write, are random or
  must run, and their aliasing;
* facts about one program: the program record (``Program``, its typed index
  spaces and per-input/output facts), the memory layout of tensors
  (``overlap``), a call's signature (which inputs share storage, are
  the same tensor, overlap: what a stage's ``cache_key`` receives) and the
  one way a storage is identified (``storage_id``), the grad-mode tag capture puts
  on each node, running a graph functionally;
* custom Functions applied in a program: the op that runs one's backward
  and which gradients that backward left undefined (Note [A Function's
  backward at run time]);
* run-time helpers: the warned eager fallback of a stage, pickling a
  compiled callable for the disk cache, the user's cache folder and the
  rule for reading and writing there (Note [Caches only the user can write]).
"""

from conveyor.analysis.functional_run import FunctionalRun, from_functional, run_functional
from conveyor.analysis.grad_regions import GRAD_META, call_graph, detach_no_grad_results, recorded_with_grad
from conveyor.analysis.overlap import Layout, overlaps, overlaps_itself, span
from conveyor.analysis.program import Program
from conveyor.analysis.program_meta import BaseIdx, InputIdx, InputInfo, OutputIdx, OutputInfo, OutputKind, ProgramMeta
from conveyor.analysis.saved_hooks import caller_saved_hooks_hidden
from conveyor.analysis.schema import (
    OpAliasing,
    addresses_storage,
    is_effectful,
    is_random,
    is_view,
    must_keep,
    op_aliasing,
    op_facts,
    swaps_storage,
    view_root,
    writes,
    written_positions,
)
from conveyor.analysis.signature import CallSignature, storage_id
from conveyor.analysis.storage_addressing import STORAGE_ADDRESSING_REASON, as_strided_of_part
from conveyor.analysis.symbolic import symbolic_layout
from conveyor.errors import DataDependentError, StageError, SymbolicSizesUnsupported
from conveyor.frontend.capture import retrace
from conveyor.frontend.function_records import BACKWARD_OP as FUNCTION_BACKWARD_OP
from conveyor.frontend.function_records import undefined_grads as function_grads_undefined
from conveyor.protocol.artifacts import Deferred, reducible
from conveyor.protocol.config import resolve
from conveyor.protocol.hookspecs import hookimpl
from conveyor.protocol.lazy import LazyImpl, lazy_names
from conveyor.protocol.lowering import eager_lowering, warn_eager
from conveyor.protocol.pipeline import Pipeline
from conveyor.protocol.plugins import Plugins
from conveyor.protocol.stage import CompiledFn, Lowering, Request, StageSpec
from conveyor.protocol.stamps import StageGraph, stamp
from conveyor.protocol.timings import step as timed_step
from conveyor.protocol.tool import ToolSpec
from conveyor.runtime.files import may_read, may_write, user_cache_dir, write_atomic

__all__ = [
    "GRAD_META",
    "BaseIdx",
    "CallSignature",
    "CompiledFn",
    "DataDependentError",
    "Deferred",
    "FUNCTION_BACKWARD_OP",
    "FunctionalRun",
    "InputIdx",
    "InputInfo",
    "Layout",
    "LazyImpl",
    "Lowering",
    "OpAliasing",
    "OutputIdx",
    "OutputInfo",
    "OutputKind",
    "Pipeline",
    "Plugins",
    "Program",
    "ProgramMeta",
    "Request",
    "StageError",
    "StageGraph",
    "StageSpec",
    "STORAGE_ADDRESSING_REASON",
    "SymbolicSizesUnsupported",
    "ToolSpec",
    "addresses_storage",
    "as_strided_of_part",
    "call_graph",
    "caller_saved_hooks_hidden",
    "detach_no_grad_results",
    "eager_lowering",
    "from_functional",
    "function_grads_undefined",
    "hookimpl",
    "is_effectful",
    "is_random",
    "is_view",
    "lazy_names",
    "may_read",
    "may_write",
    "must_keep",
    "op_aliasing",
    "op_facts",
    "overlaps",
    "overlaps_itself",
    "recorded_with_grad",
    "reducible",
    "resolve",
    "retrace",
    "run_functional",
    "span",
    "stamp",
    "storage_id",
    "swaps_storage",
    "symbolic_layout",
    "timed_step",
    "user_cache_dir",
    "view_root",
    "warn_eager",
    "write_atomic",
    "writes",
    "written_positions",
]
