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

from conveyor_triton import kernel_cache, metrics, tuning
from conveyor_triton.aten_step import node_call
from conveyor_triton.bound_launch import bind, binds_launches
from conveyor_triton.codegen_scatter import (
    Layout,
    ScatterKernel,
    generate_generic_scatter,
    generate_scatter,
    generic_args,
)
from conveyor_triton.launch import Launch, block_sizes, launch_device
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
    #: the stage's ``autotune`` option (Note [Tuned launches] in conveyor_triton.tuning)
    autotune: bool = True
    _kernels: dict[tuple[str, tuple[Layout, ...]], ScatterKernel] = field(default_factory=dict)
    _generic: dict[tuple[str, bool], ScatterKernel] = field(default_factory=dict)
    _fns: dict[str, tuple[Any, Path]] = field(default_factory=dict)
    _call: Any = None
    #: static kernels' launches bound to their compiled kernels, per source (Note [Bound launches])
    _bound: dict[str, Any] = field(default_factory=dict)
    #: the launches kept by tuning, per static kernel source
    _tuned: dict[str, Launch] = field(default_factory=dict)

    def __getstate__(self) -> dict[str, Any]:
        # Note [Picklable run-time callables] in conveyor.protocol.artifacts
        return {**self.__dict__, "_kernels": {}, "_generic": {}, "_fns": {}, "_call": None, "_bound": {}, "_tuned": {}}

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
        index, source), generated when first met: a static kernel bound after
        its first launch on CUDA (Note [Bound launches] in
        ``conveyor_triton.bound_launch``) and, when it only stores, tuned
        there (Note [Tuned launches] in ``conveyor_triton.tuning``)."""
        out = tensors[0]
        device = launch_device(self.launch_for, out.device)
        if not self.static:
            self._launch_generic(s, name, tensors, device)
            return
        layouts = tuple(_layout(t) for t in tensors)
        same = (name, layouts) == (self.name, self.kernel.layouts)
        kernel = self.kernel if same else self._kernels.get((name, layouts))
        if kernel is None:
            kernel = self._kernels[(name, layouts)] = generate_scatter(s, name, layouts, device)
        launch = self._tuned.get(kernel.source) or kernel.launch
        if launch.grid > 0:
            bound = self._bound.get(kernel.source)
            if bound is None or not bound(tensors):
                fn, file = self._fn(kernel)
                if bound is None and kernel.source not in self._tuned and self.autotune:
                    launch = self._tuned[kernel.source] = self._tune(kernel, fn, file, tensors, math.prod(s.shape))
                compiled = fn[(launch.grid,)](*tensors, **_meta(launch.meta, out))
                if bound is None and binds_launches(out.device):
                    self._bound[kernel.source] = bind(compiled, launch, tensors)
        self._record(kernel, tensors, launch.meta)

    def _tune(self, kernel: ScatterKernel, fn: Any, file: Path, tensors: list[torch.Tensor], numel: int) -> Launch:
        """The launch a static kernel keeps: the fastest of a few on a GPU
        when it only stores (Note [Tuned launches]: running a kernel that
        adds again would add twice)."""
        device = tensors[0].device
        if not (tuning.wanted(device) and tuning.tunable(kernel.source, kernel.launch, numel)):
            return kernel.launch

        def run(option: Launch) -> None:
            fn[(option.grid,)](*tensors, **_meta(option.meta, tensors[0]))
            if metrics.watched():  # the ahead-of-time check compiles every candidate too
                metrics.launched(kernel, tensors, option.meta)

        return tuning.tune(run, tuning.candidates(kernel.launch, numel, None), device, file)

    def _launch_generic(self, s: Scatter, name: str, tensors: list[torch.Tensor], device: torch.device) -> None:
        """Launch the generic kernel (sizes and strides as arguments), through
        the ``JITFunction``: its grid follows the sizes."""
        args, index64 = generic_args(s, tensors)
        kernel = self._generic.get((name, index64))
        if kernel is None:
            source = generate_generic_scatter(s, name, index64)
            kernel = self._generic[(name, index64)] = ScatterKernel(name, source, self.kernel.launch, ())
        launch_meta = dict(block_sizes(device, math.prod(s.shape), None))
        grid = -(-math.prod(s.shape) // launch_meta["XBLOCK"])
        fn, _ = self._fn(kernel)
        fn[(grid,)](*args, **_meta(launch_meta, tensors[0]))
        self._record(kernel, args, launch_meta, tensors)

    def _fn(self, kernel: ScatterKernel) -> tuple[Any, Path]:
        """The jit function of ``kernel`` and its file, loaded when first needed."""
        loaded = self._fns.get(kernel.source)
        if loaded is None:
            loaded = self._fns[kernel.source] = kernel_cache.load(kernel.source, kernel.name, self.cache_dir)
            if self.log:
                print(f"[conveyor_triton] kernel {kernel.name} -> {loaded[1]}\n{kernel.source}")
        return loaded

    def _record(
        self, kernel: ScatterKernel, args: list[Any], meta: dict[str, Any], tensors: list[torch.Tensor] | None = None
    ) -> None:
        tensors = tensors if tensors is not None else args
        if metrics.active():
            metrics.record("kernel", tensors[1:], [tensors[0]])
        if metrics.watched():
            metrics.launched(kernel, args, meta)


def _meta(meta: dict[str, Any], out: torch.Tensor) -> dict[str, Any]:
    """A launch's keyword arguments, in Triton's debug mode on CUDA (Note
    [Indexes out of range] in ``conveyor_triton.index_reads``: the kernel's
    range check traps)."""
    return {**meta, "debug": True} if out.is_cuda else dict(meta)
