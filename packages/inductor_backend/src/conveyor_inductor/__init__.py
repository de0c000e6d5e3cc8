"""conveyor-inductor: Inductor's code generation as a conveyor backend.

Use it with ``conveyor.compile(fn, backend="inductor")`` or
``torch.compile(fn, backend="conveyor", options={"backend": "inductor"})``:
conveyor's stages (functionalize, synthetic bases, dedupe, the autograd
partition) hand their final functional graphs to Inductor, which writes C++
kernels on CPU and Triton kernels on CUDA. See what it generated with
:func:`programs`.

The names below are imported on first use (PEP 562): registering the stage
imports none of them (Note [Stage implementations imported when they run]
in ``conveyor.protocol.lazy``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from conveyor.stage_api import lazy_names

from conveyor_inductor.__about__ import __version__

if TYPE_CHECKING:
    from conveyor_inductor.introspect import programs
    from conveyor_inductor.program import InductorProgram

_WHERE = {"programs": "conveyor_inductor.introspect", "InductorProgram": "conveyor_inductor.program"}

__getattr__, __dir__ = lazy_names(globals(), _WHERE)

__all__ = ["InductorProgram", "__version__", "programs"]
