"""conveyor-triton: the Triton backend for conveyor.

Use it with ``conveyor.compile(fn, backend="triton")`` (the default for CUDA
inputs when installed). See what it made of each graph with
:func:`reports` / :func:`programs`.
"""

from conveyor_triton.__about__ import __version__
from conveyor_triton.introspect import programs, reports
from conveyor_triton.program import Program
from conveyor_triton.report import Fallback, KernelEntry, Report

__all__ = ["Fallback", "KernelEntry", "Program", "Report", "__version__", "programs", "reports"]
