"""conveyor-triton: the Triton backend for conveyor.

Use it with ``conveyor.compile(fn, backend="triton")`` (the default for CUDA
inputs when installed). See what it made of each graph with
:func:`reports` / :func:`programs`.

The names below are imported on first use (PEP 562), so that importing the
package, as every pipeline's registration does through
:mod:`conveyor_triton.plugin`, does not import the backend (Note
[Registering without importing the backend] in :mod:`conveyor_triton.stage`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from conveyor.stage_api import lazy_names

from conveyor_triton.__about__ import __version__

if TYPE_CHECKING:
    from conveyor_triton.introspect import programs, reports
    from conveyor_triton.program import Program
    from conveyor_triton.report import Fallback, KernelEntry, Report

__all__ = ["Fallback", "KernelEntry", "Program", "Report", "__version__", "programs", "reports"]

_WHERE = {
    "programs": "conveyor_triton.introspect",
    "reports": "conveyor_triton.introspect",
    "Program": "conveyor_triton.program",
    "Fallback": "conveyor_triton.report",
    "KernelEntry": "conveyor_triton.report",
    "Report": "conveyor_triton.report",
}


__getattr__, __dir__ = lazy_names(globals(), _WHERE)
