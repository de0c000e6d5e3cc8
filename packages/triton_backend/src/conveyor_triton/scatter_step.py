"""A scatter's step of a triton program: the destination's copy, then the
kernel over the source's elements (Note [Scatters] in
``conveyor_triton.scatters``)."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.fx

from conveyor_triton import kernel_cache, metrics
from conveyor_triton.aten_step import node_call
from conveyor_triton.codegen_scatter import (
    Layout,
    ScatterKernel,
    generate_generic_scatter,
    generate_scatter,
    generic_args,
)
from conveyor_triton.launch import block_sizes, launch_device
from conveyor_triton.scatters import Scatter


def _distinct(index: torch.Tensor, size: int) -> bool:
    """Whether no two of ``index``'s values (negative ones counted from the
    end of ``size``) are equal."""
    wrapped = torch.where(index < 0, index + size, index)
    return int(torch.unique(wrapped).numel()) == wrapped.numel()


def _layout(t: Any) -> Layout:
    return (tuple(t.shape), tuple(t.stride()))


@dataclass
class ScatterStep:
    """One scatter: a copy of the destination (in eager's layout), then its
    kernel. The kernel for the layouts the graph had is generated at compile
    time; others are generated when a run meets them. The node runs as
    eager's op when one of its indexes is out of range on CPU (eager's error),
    when two are equal where the kernel needs them distinct on CPU, or on CUDA
    while deterministic algorithms are on (Note [Scatters])."""

    node: torch.fx.Node
    scatter: Scatter
    name: str
    kernel: ScatterKernel
    cache_dir: Path | None
    #: the output's strides (eager's, as a kernel's stored value: ``lower._strides``)
    strides: tuple[int, ...] = ()
    log: bool = False
    #: the stage's ``launch_for`` option (None: the tensors' device type)
    launch_for: str | None = None
    #: False: the per-size programs of a symbolically sized graph, which share the generic kernel
    static: bool = True
    _kernels: dict[tuple[str, tuple[Layout, ...]], ScatterKernel] = field(default_factory=dict)
    _generic: dict[tuple[str, bool], ScatterKernel] = field(default_factory=dict)
    _fns: dict[str, Any] = field(default_factory=dict)
    _call: Any = None

    def __getstate__(self) -> dict[str, Any]:
        # Note [Picklable run-time callables] in conveyor.protocol.artifacts
        return {**self.__dict__, "_kernels": {}, "_generic": {}, "_fns": {}, "_call": None}

    def reads(self) -> set[torch.fx.Node]:
        """The values this step reads from the environment."""
        return set(self.node.all_input_nodes)

    def run_as_aten(self, env: dict[torch.fx.Node, Any]) -> None:
        """Eager's op."""
        if self._call is None:
            self._call = node_call(self.node)
        env[self.node] = self._call(env)

    def run(self, env: dict[torch.fx.Node, Any]) -> None:
        s = self.scatter
        index = env[s.index]
        if index.is_cuda:
            if (s.mode == "store" or s.dtype.is_floating_point) and torch.are_deterministic_algorithms_enabled():
                self.run_as_aten(env)
                return
        elif not s.bound.holds(index) or (s.distinct and not _distinct(index, s.size)):
            self.run_as_aten(env)  # Note [Indexes out of range]: eager's error; or equal indexes
            return
        out = torch.empty_strided(s.dest_shape, self.strides, dtype=s.dtype, device=index.device)
        env[self.node] = out
        if s.dest is None:
            out.zero_()
        else:
            dest = env[s.dest]
            out.copy_(dest.detach())  # a kernel's result records no autograd history
            if metrics.active():
                metrics.record("aten", [dest], [out])
        if index.numel() == 0 or out.numel() == 0:
            return
        if s.clears:  # scatter_reduce without self: the elements written start from zero
            self._launch(
                dataclasses.replace(s, source=0, mode="store", clears=False), f"{self.name}_clear", [out, index]
            )
        tensors = [out, index]
        if isinstance(s.source, torch.fx.Node):
            tensors.append(env[s.source])
        self._launch(s, self.name, tensors)

    def _launch(self, s: Scatter, name: str, tensors: list[torch.Tensor]) -> None:
        """Launch the kernel of ``s`` for the layouts of ``tensors`` (output,
        index, source), generated when first met."""
        out = tensors[0]
        device = launch_device(self.launch_for, out.device)
        args: list[Any] = list(tensors)
        if self.static:
            layouts = tuple(_layout(t) for t in tensors)
            same = (name, layouts) == (self.name, self.kernel.layouts)
            kernel = self.kernel if same else self._kernels.get((name, layouts))
            if kernel is None:
                kernel = self._kernels[(name, layouts)] = generate_scatter(s, name, layouts, device)
            grid, launch_meta = kernel.launch.grid, dict(kernel.launch.meta)
        else:  # the generic kernel: sizes and strides are arguments
            args, index64 = generic_args(s, tensors)
            kernel = self._generic.get((name, index64))
            if kernel is None:
                source = generate_generic_scatter(s, name, index64)
                kernel = self._generic[(name, index64)] = ScatterKernel(name, source, self.kernel.launch, ())
            launch_meta = dict(block_sizes(device, math.prod(s.shape), None))
            grid = -(-math.prod(s.shape) // launch_meta["XBLOCK"])
        fn = self._fns.get(kernel.source)
        if fn is None:
            fn, file = kernel_cache.load(kernel.source, kernel.name, self.cache_dir)
            self._fns[kernel.source] = fn
            if self.log:
                print(f"[conveyor_triton] kernel {kernel.name} -> {file}\n{kernel.source}")
        meta: dict[str, Any] = {**launch_meta, "debug": True} if out.is_cuda else launch_meta
        fn[(grid,)](*args, **meta)
        if metrics.active():
            metrics.record("kernel", tensors[1:], [out])
        if metrics.watched():
            metrics.launched(kernel, args, launch_meta)
