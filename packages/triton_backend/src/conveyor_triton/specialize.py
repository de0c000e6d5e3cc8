"""Symbolically sized graphs: one program per concrete size, kernels shared.

Note [Symbolic sizes in the triton backend]: under automatic dynamic shapes
(``conveyor.compile``'s ``dynamic`` option, compiled autograd's lifted sizes)
the backend receives a graph whose fake inputs have symbolic sizes. The
kernel generator needs static shapes for its index arithmetic and block
choice, so a symbolic graph is lowered lazily, once per concrete size
signature seen at run time: the graph is retraced on static fakes of the
call's arguments and compiled as any static graph. The generated kernel
sources do not depend on the sizes (sizes and strides are kernel arguments),
so every specialization loads the same cached kernels; what a new size costs
is one retrace and one lowering, not a run of the whole pipeline, and the
stages before the backend compile once for all sizes.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import conveyor
import torch
from conveyor import CompiledFn, Request
from conveyor.stage_api import symbolic_layout
from torch._subclasses.fake_tensor import FakeTensorMode

#: specializations kept per graph (a long decode loop sees a new length per token)
LIMIT = 64


def is_symbolic(request: Request) -> bool:
    """Whether any input of ``request`` has a symbolic size, stride or offset
    (or is a symbolic integer)."""
    for x in request.inputs:
        if isinstance(x, torch.SymInt | torch.SymFloat | torch.SymBool):
            return True
        if isinstance(x, torch.Tensor) and symbolic_layout(x):
            return True
    return False


class PerSizes:
    """The compiled callable for a symbolic graph: a static program per size
    signature of the arguments, compiled on first sight (bounded, least
    recently used dropped first).

    :param request: the symbolic request the backend received.
    :param compile_static: the backend's compile for a static request.
    """

    def __init__(self, request: Request, compile_static: Callable[[Request], CompiledFn]) -> None:
        self.request = request
        self.compile_static = compile_static
        self.programs: OrderedDict[Hashable, CompiledFn] = OrderedDict()
        #: the program of the last call (what ``conveyor_triton.reports`` shows)
        self.last: CompiledFn | None = None

    def __call__(self, args: list[Any]) -> Sequence[Any]:
        key = tuple(_signature(a) for a in args)
        program = self.programs.get(key)
        if program is None:
            program = self._specialize(args)
            self.programs[key] = program
            if len(self.programs) > LIMIT:
                self.programs.popitem(last=False)
        else:
            self.programs.move_to_end(key)
        self.last = program
        return program(args)

    def _specialize(self, args: Sequence[Any]) -> CompiledFn:
        fake_mode = FakeTensorMode()
        fakes = [fake_mode.from_tensor(a, static_shapes=True) if isinstance(a, torch.Tensor) else a for a in args]
        graph = self.request.graph

        def run(*flat: Any) -> tuple[Any, ...]:
            return conveyor.call_graph(graph, flat)

        static = conveyor.retrace(run, fakes, fake_mode)
        return self.compile_static(self.request.replace(graph=static, inputs=tuple(fakes), fake_mode=fake_mode))


def _signature(a: Any) -> Hashable:
    if isinstance(a, torch.Tensor):
        if a.layout is not torch.strided:  # sparse: no strides or offset to key on
            return (a.layout, a.shape, a.dtype, a.device, a.requires_grad)
        return (a.shape, a.stride(), a.storage_offset(), a.dtype, a.device, a.requires_grad)
    return a
