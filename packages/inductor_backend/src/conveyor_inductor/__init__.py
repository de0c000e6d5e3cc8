"""conveyor-inductor: Inductor's code generation as a conveyor backend.

Use it with ``conveyor.compile(fn, backend="inductor")`` or
``torch.compile(fn, backend="conveyor", options={"backend": "inductor"})``:
conveyor's stages (functionalize, synthetic bases, dedupe, the autograd
partition) hand their final functional graphs to Inductor, which writes C++
kernels on CPU and Triton kernels on CUDA. See what it generated with
:func:`programs`.
"""

from conveyor_inductor.__about__ import __version__
from conveyor_inductor.introspect import programs
from conveyor_inductor.program import InductorProgram

__all__ = ["InductorProgram", "__version__", "programs"]
