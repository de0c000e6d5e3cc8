"""The compiled program: kernel launches and aten calls, in order.

A :class:`Program` is the backend's compiled callable (Note [Flat calling
convention] in ``conveyor.protocol.stage``): it takes the list of flat inputs, runs its
steps over an environment of real tensors keyed by graph node, and returns
the graph's outputs. Views run as aten view ops (no copy) and kernels read
their results through strides; a view of a fused value that is needed outside
its kernel is taken after the kernel from the stored value, so outputs alias
each other exactly as in eager.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, cast

import torch
import torch.fx
from conveyor.stage_api import span

from conveyor_triton import kernel_cache, metrics, tuning
from conveyor_triton.aten_step import AtenStep, node_call, run_node
from conveyor_triton.bound_launch import bind
from conveyor_triton.codegen import KernelSource, TensorArg
from conveyor_triton.dtypes import rounds_explicitly
from conveyor_triton.index_reads import IndexBound
from conveyor_triton.launch import Launch, block_sizes, launch_device
from conveyor_triton.report import Report
from conveyor_triton.scatter_step import ScatterStep

INT32_LIMIT = 2**31 - 1

#: which source of a kernel step: the static kernel, the generic ones with 32- and 64-bit indexing
Variant = Literal["static", "combine", "generic", "generic64"]


def needs_index64(total: int, layouts: Sequence[tuple[Sequence[int], Sequence[int]]]) -> bool:
    """Whether a launch over ``total`` elements touching tensors laid out as
    ``layouts`` (sizes, strides) needs 64-bit indexing."""
    return total > INT32_LIMIT or any(span(shape, stride) > INT32_LIMIT for shape, stride in layouts)


@dataclass
class KernelStep:
    """One kernel launch. ``sources`` holds the static kernel when the graph
    had static sizes (Note [Static layouts] in ``conveyor_triton.codegen``),
    and the generic kernels with 32- and 64-bit indexing; each is loaded only
    when a launch needs it. The static kernel runs when every loaded value
    has the layout it was generated for (checked per launch)."""

    sources: dict[Variant, KernelSource]
    store_strides: tuple[tuple[int, ...], ...]
    post_views: tuple[torch.fx.Node, ...]
    cache_dir: Path | None
    poison: bool
    log: bool
    members: tuple[torch.fx.Node, ...] = ()
    files: dict[Variant, Path] = field(default_factory=dict)
    _fns: dict[Variant, Any] = field(default_factory=dict)
    _warned: bool = False
    #: the static kernels' launches bound to their compiled kernels (Note [Bound launches] in conveyor_triton.bound_launch)
    _bound: dict[Variant, Any] = field(default_factory=dict)
    #: the stage's ``launch_for`` option: the device type generic launches are chosen for (None: the tensors')
    launch_for: str | None = None
    #: where the outputs go when the kernel loads nothing (read off the graph at compile time)
    device: torch.device | None = None
    #: the post views' calls (Note [Node calls]), built at the first run
    _view_calls: Any = None
    #: the stage's ``autotune`` option: try a few launches of each static kernel on a GPU (Note [Tuned launches])
    autotune: bool = True
    #: the launches kept by tuning, per variant
    _tuned: dict[Variant, Launch] = field(default_factory=dict)
    #: the ranges its index reads' indexes must keep (Note [Indexes out of range] in conveyor_triton.index_reads)
    bounds: tuple[IndexBound, ...] = ()

    def __post_init__(self) -> None:
        if self.device is None and self.kernel.stores:
            self.device = self.kernel.stores[0].node.meta["val"].device

    def __getstate__(self) -> dict[str, Any]:
        # Note [Picklable run-time callables] in conveyor.protocol.artifacts: the loaded
        # jit functions are not stored; fn() loads them again from the sources
        return {**self.__dict__, "_fns": {}, "files": {}, "_bound": {}, "_view_calls": None, "_tuned": {}}

    @functools.cached_property
    def generic_rounds(self) -> bool:
        """Whether the generic kernels round to a 16-bit float explicitly (read
        once, not per launch: Note [Explicit roundings and FMA])."""
        return rounds_explicitly(self.sources["generic"].source)

    def run_views(self, env: dict[torch.fx.Node, Any]) -> None:
        """Take the post views of the stored values (Note [Node calls])."""
        calls = self._view_calls
        if calls is None:
            calls = self._view_calls = tuple((v, node_call(v)) for v in self.post_views)
        for view, call in calls:
            env[view] = call(env)

    @property
    def kernel(self) -> KernelSource:
        """The source that runs when layouts are as compiled: the static one, if any."""
        return self.sources.get("static") or self.sources["generic"]

    def reads(self) -> set[torch.fx.Node]:
        """The values this step reads from the environment."""
        return {a.node for a in self.kernel.loads} | {n for v in self.post_views for n in v.all_input_nodes}

    def fn(self, variant: Variant) -> Any:
        if variant not in self._fns:
            src = self.sources[variant]
            self._fns[variant], self.files[variant] = kernel_cache.load(src.source, src.name, self.cache_dir)
            if self.log:
                print(f"[conveyor_triton] kernel {src.name} -> {self.files[variant]}\n{src.source}")
        return self._fns[variant]

    def run(self, env: dict[torch.fx.Node, Any]) -> None:
        if self.bounds and not self._in_range(env):
            self.run_members(env)  # Note [Indexes out of range]: eager's error
            return
        k = self.kernel
        static = k.launch is not None
        for a in k.loads:
            t = env[a.node]
            if t.dtype != a.dtype:
                wrong = [(b.node, env[b.node].dtype, b.dtype) for b in k.loads if env[b.node].dtype != b.dtype]
                self.run_as_aten(env, wrong)
                return
            if static and (t.stride() != a.layout[1] or t.shape != a.layout[0]):  # type: ignore[index]
                static = False
        if static:
            self.run_static(env, k)
        else:
            self.run_generic(env)

    def _in_range(self, env: dict[torch.fx.Node, Any]) -> bool:
        """Whether every index read's index on CPU is in range (Note [Indexes
        out of range]); an index the kernel recomputes (Note [Index
        producers] in ``conveyor_triton.index_reads``) is computed by its
        node's aten call for the check."""
        for b in self.bounds:
            index = env.get(b.index)
            if index is None:
                index = _recompute(b.index, env)
            if index is not None and not index.is_cuda and not b.holds(index):
                return False
        return True

    def run_static(self, env: dict[torch.fx.Node, Any], k: KernelSource) -> None:
        """Launch the static kernel (a split reduction's two: Note [Split
        reductions]): its tensors are its only arguments."""
        loads = [env[a.node] for a in k.loads]
        device = loads[0].device if loads else self.device
        second = self.sources.get("combine")
        stores = self._allocate(k.stores, device, poison=second is None)
        if second is None:
            for store, out in zip(k.stores, stores):
                env[store.node] = out
        if k.xnumel > 0:  # rows of no elements still launch: their sums are 0
            self._launch("static", k, loads, stores)
        if second is not None:
            outs = self._allocate(second.stores, device, poison=True)
            for store, out in zip(second.stores, outs):
                env[store.node] = out
            if k.xnumel > 0:
                self._launch("combine", second, stores, outs)
        self.run_views(env)

    def _allocate(self, stores: Sequence[TensorArg], device: Any, poison: bool) -> list[torch.Tensor]:
        outs = []
        for store in stores:
            shape, stride = cast(tuple[tuple[int, ...], tuple[int, ...]], store.layout)
            out = torch.empty_strided(shape, stride, dtype=store.dtype, device=device)
            if self.poison and poison:
                out.fill_(_poison(store.dtype))
            outs.append(out)
        return outs

    def _launch(self, variant: Variant, k: KernelSource, loads: list[torch.Tensor], outs: list[torch.Tensor]) -> None:
        launch = self._tuned.get(variant) or cast(Launch, k.launch)
        args = [*loads, *outs]
        if launch.grid > 0:
            bound = self._bound.get(variant)
            if bound is None and variant not in self._tuned and self.autotune:
                launch = self._tuned[variant] = self._tune(variant, k, launch, args)
            if bound is None or not bound(args):
                compiled = self.fn(variant)[(launch.grid,)](*args, **self._meta(launch.meta, args[0]))
                if bound is None and args[0].is_cuda:
                    self._bound[variant] = bind(compiled, launch, args)
        if metrics.active():
            metrics.record("kernel", loads, outs)
        if metrics.watched():
            metrics.launched(k, args, launch.meta)

    def _tune(self, variant: Variant, k: KernelSource, launch: Launch, args: list[torch.Tensor]) -> Launch:
        """The launch a static kernel keeps (Note [Tuned launches] in
        ``conveyor_triton.tuning``): the fastest of a few on a GPU."""
        device = args[0].device
        if not (tuning.wanted(device) and tuning.tunable(k.source, launch, k.xnumel * (k.rnumel or 1))):
            return launch
        fn = self.fn(variant)

        def run(option: Launch) -> None:
            fn[(option.grid,)](*args, **self._meta(option.meta, args[0]))
            if metrics.watched():  # the ahead-of-time check compiles every candidate too
                metrics.launched(k, args, option.meta)

        options = tuning.candidates(launch, k.xnumel, k.rnumel)
        return tuning.tune(run, options, device, self.files.get(variant))

    def run_generic(self, env: dict[torch.fx.Node, Any]) -> None:
        """Launch a generic kernel (sizes and strides as arguments)."""
        k = self.sources["generic"]
        args: list[Any] = []
        tensors: list[torch.Tensor] = []
        for load in k.loads:
            t = env[load.node].expand(load.shape)
            tensors.append(t)
            if load.permute is not None:
                t = t.permute(load.permute)
            args += [t, *t.shape[1:], *t.stride()]
        device = tensors[0].device if tensors else None
        outs = []
        for store, stride in zip(k.stores, self.store_strides):
            device = device or self.device
            out = torch.empty_strided(store.shape, stride, dtype=store.dtype, device=device)
            if self.poison:
                out.fill_(_poison(store.dtype))
            outs.append(out)
            env[store.node] = out
            addressed = out if store.permute is None else out.permute(store.permute)
            args += [out, *addressed.shape[1:], *addressed.stride()]
        args.append(k.xnumel)
        if k.rnumel is not None:
            args.append(k.rnumel)
        total = k.xnumel * (k.rnumel or 1)
        if k.xnumel > 0:  # rows of no elements still launch: their sums are 0
            variant: Variant = (
                "generic64" if needs_index64(total, [(t.shape, t.stride()) for t in [*tensors, *outs]]) else "generic"
            )
            for_device = launch_device(self.launch_for, cast(torch.device, device))  # device: a load's or a store's
            blocks: dict[str, Any] = dict(block_sizes(for_device, k.xnumel, k.rnumel))
            if self.generic_rounds:  # Note [Explicit roundings and FMA]
                blocks["enable_fp_fusion"] = False
            grid = ((k.xnumel + blocks["XBLOCK"] - 1) // blocks["XBLOCK"],)
            self.fn(variant)[grid](*args, **self._meta(blocks, tensors[0] if tensors else outs[0]))
            if metrics.active():
                metrics.record("kernel", tensors, outs)
            if metrics.watched():
                metrics.launched(self.sources[variant], args, blocks)
        self.run_views(env)

    def run_as_aten(
        self, env: dict[torch.fx.Node, Any], wrong: list[tuple[torch.fx.Node, torch.dtype, torch.dtype]]
    ) -> None:
        """Note [Meta dtypes that differ from eager]: an aten fallback returned
        another dtype than its meta kernel said at compile time (torch 2.13's
        ``_native_batch_norm_legit_functional`` on bfloat16 CPU tensors gives
        bfloat16 running stats, its meta float32). The kernel, generated for the
        meta dtype, would read the bits wrongly, so the group's nodes run as
        aten calls instead, with a warning (once per kernel)."""
        if not self._warned:
            node, got, expected = wrong[0]
            warnings.warn(
                f"conveyor_triton: kernel {self.kernel.name} runs as aten calls: {node.name} is {got} at run time, "
                f"its meta kernel said {expected}",
                stacklevel=2,
            )
            self._warned = True
        self.run_members(env)

    def run_members(self, env: dict[torch.fx.Node, Any]) -> None:
        """Run the kernel's nodes as aten calls."""
        for node in self.members:
            env[node] = run_node(node, env, None)
        self.run_views(env)

    def _meta(self, meta: dict[str, Any], tensor: torch.Tensor) -> dict[str, Any]:
        """A launch's keyword arguments, in Triton's debug mode on CUDA when
        the kernel reads at computed indexes (Note [Indexes out of range] in
        ``conveyor_triton.index_reads``)."""
        return {**meta, "debug": True} if self.bounds and tensor.is_cuda else meta


def _recompute(node: torch.fx.Node, env: dict[torch.fx.Node, Any]) -> torch.Tensor | None:
    """The value of ``node``, which a kernel recomputes (Note [Index producers]
    in ``conveyor_triton.index_reads``), by aten calls from the values in
    ``env``; None where one of them is on CUDA (the kernel's assert checks it)."""
    scratch: dict[torch.fx.Node, Any] = {}
    for a in node.all_input_nodes:
        value = env[a] if a in env else _recompute(a, env)
        if value is None or value.is_cuda:
            return None
        scratch[a] = value
    return run_node(node, scratch, None)  # type: ignore[no-any-return]


def _poison(dtype: torch.dtype) -> Any:
    if dtype is torch.bool:
        return True
    if dtype.is_floating_point:
        return torch.finfo(dtype).max
    return torch.iinfo(dtype).min


class Program:
    """The triton backend's compiled callable for one graph."""

    def __init__(
        self,
        placeholders: Sequence[torch.fx.Node],
        steps: Sequence[KernelStep | AtenStep | ScatterStep],
        outputs: Sequence[Any],
        report: Report,
    ) -> None:
        self.placeholders = tuple(placeholders)
        self.steps = tuple(steps)
        self.outputs = tuple(outputs)
        self.report = report
        # values no later step and no output needs, dropped after each step (peak memory as eager's)
        last: dict[torch.fx.Node, int] = {}
        for i, step in enumerate(self.steps):
            for n in step.reads():
                last[n] = i
        kept = {o for o in self.outputs if isinstance(o, torch.fx.Node)}
        self.release: tuple[tuple[torch.fx.Node, ...], ...] = tuple(
            tuple(n for n, i in last.items() if i == k and n not in kept) for k in range(len(self.steps))
        )

    @property
    def kernels(self) -> tuple[KernelStep, ...]:
        return tuple(s for s in self.steps if isinstance(s, KernelStep))

    @property
    def launches_kernels(self) -> bool:
        """Whether a step runs a generated kernel (a fusion group's or a scatter's),
        which records no autograd history."""
        return any(isinstance(s, (KernelStep, ScatterStep)) for s in self.steps)

    def __call__(self, args: list[Any]) -> list[Any]:
        env: dict[torch.fx.Node, Any] = dict(zip(self.placeholders, args))
        args.clear()
        for step, done in zip(self.steps, self.release):
            step.run(env)
            for n in done:
                del env[n]
        return [env[o] if isinstance(o, torch.fx.Node) else o for o in self.outputs]
