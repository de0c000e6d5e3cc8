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

import importlib
from typing import TYPE_CHECKING, Any

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


def __getattr__(name: str) -> Any:
    where = _WHERE.get(name)
    if where is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(where), name)
    globals()[name] = value  # later reads find it without this hook
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
