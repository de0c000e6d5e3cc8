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

import operator
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import torch
import torch.fx
from conveyor.stage_api import span

from conveyor_triton import kernel_cache, metrics
from conveyor_triton.classify import is_view
from conveyor_triton.codegen import KernelSource
from conveyor_triton.report import Report

INT32_LIMIT = 2**31 - 1


def _next_pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


def block_sizes(device: torch.device, xnumel: int, rnumel: int | None) -> dict[str, int]:
    """Block sizes: big blocks and few programs in the interpreter (each program
    costs about a millisecond there), GPU-sized ones on CUDA."""
    interpreted = device.type != "cuda"
    if rnumel is None:
        return {"XBLOCK": min(_next_pow2(max(xnumel, 1)), 1 << 15 if interpreted else 1024)}
    rblock = min(_next_pow2(max(rnumel, 1)), 2048 if interpreted else 1024)
    budget = (1 << 15 if interpreted else 4096) // rblock
    return {"XBLOCK": max(1, min(_next_pow2(max(xnumel, 1)), budget)), "RBLOCK": rblock}


def _extent(t: torch.Tensor) -> int:
    return span(t.shape, t.stride())


@dataclass
class KernelStep:
    """One kernel launch. ``sources`` holds the 32-bit and the 64-bit indexing
    variants; the latter is loaded only when a launch needs it."""

    sources: dict[bool, KernelSource]
    store_strides: tuple[tuple[int, ...], ...]
    post_views: tuple[torch.fx.Node, ...]
    cache_dir: Path | None
    poison: bool
    log: bool
    members: tuple[torch.fx.Node, ...] = ()
    files: dict[bool, Path] = field(default_factory=dict)
    _fns: dict[bool, Any] = field(default_factory=dict)
    _warned: bool = False
    #: where the outputs go when the kernel loads nothing (read off the graph at compile time)
    device: torch.device | None = None

    def __post_init__(self) -> None:
        if self.device is None and self.kernel.stores:
            self.device = self.kernel.stores[0].node.meta["val"].device

    def __getstate__(self) -> dict[str, Any]:
        # Note [Picklable run-time callables] in conveyor.protocol.artifacts: the loaded
        # jit functions are not stored; fn() loads them again from the sources
        return {**self.__dict__, "_fns": {}, "files": {}}

    @property
    def kernel(self) -> KernelSource:
        return self.sources[False]

    def reads(self) -> set[torch.fx.Node]:
        """The values this step reads from the environment."""
        return {a.node for a in self.kernel.loads} | {n for v in self.post_views for n in v.all_input_nodes}

    def fn(self, index64: bool) -> Any:
        if index64 not in self._fns:
            src = self.sources[index64]
            self._fns[index64], self.files[index64] = kernel_cache.load(src.source, src.name, self.cache_dir)
            if self.log:
                print(f"[conveyor_triton] kernel {src.name} -> {self.files[index64]}\n{src.source}")
        return self._fns[index64]

    def run(self, env: dict[torch.fx.Node, Any]) -> None:
        k = self.kernel
        wrong = [(a.node, env[a.node].dtype, a.dtype) for a in k.loads if env[a.node].dtype != a.dtype]
        if wrong:
            self.run_as_aten(env, wrong)
            return
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
        if total > 0 and k.xnumel > 0:
            index64 = total > INT32_LIMIT or any(_extent(t) > INT32_LIMIT for t in [*tensors, *outs])
            blocks = block_sizes(cast(torch.device, device), k.xnumel, k.rnumel)  # set by a load or a store
            grid = ((k.xnumel + blocks["XBLOCK"] - 1) // blocks["XBLOCK"],)
            self.fn(index64)[grid](*args, **blocks)
            if metrics.watched():
                metrics.launched(self.sources[index64], args, blocks)
            if metrics.active():
                metrics.record("kernel", tensors, outs)
        for view in self.post_views:
            env[view] = run_node(view, env, None)


    def run_as_aten(self, env: dict[torch.fx.Node, Any], wrong: list[tuple[torch.fx.Node, torch.dtype, torch.dtype]]) -> None:
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
        for node in self.members:
            env[node] = run_node(node, env, None)
        for view in self.post_views:
            env[view] = run_node(view, env, None)


def _poison(dtype: torch.dtype) -> Any:
    if dtype is torch.bool:
        return True
    if dtype.is_floating_point:
        return torch.finfo(dtype).max
    return torch.iinfo(dtype).min


def run_node(node: torch.fx.Node, env: dict[torch.fx.Node, Any], module: torch.fx.GraphModule | None) -> Any:
    """Run one node as aten (a fallback, a view, or a ``get_attr``)."""
    if node.op == "get_attr":
        obj: Any = module
        for part in str(node.target).split("."):
            obj = getattr(obj, part)
        return obj
    args = torch.fx.node.map_arg(node.args, lambda n: env[n])
    kwargs = torch.fx.node.map_arg(node.kwargs, lambda n: env[n])
    return node.target(*args, **kwargs)  # type: ignore[operator]


@dataclass
class AtenStep:
    node: torch.fx.Node
    module: torch.fx.GraphModule

    def reads(self) -> set[torch.fx.Node]:
        """The values this step reads from the environment."""
        return set(self.node.all_input_nodes)

    def run(self, env: dict[torch.fx.Node, Any]) -> None:
        env[self.node] = out = run_node(self.node, env, self.module)
        if metrics.active() and self.launches:
            reads = [env[n] for n in self.node.all_input_nodes]
            metrics.record("aten", reads, [out])

    @property
    def launches(self) -> bool:
        """Whether this call is a kernel of its own (not a view, not a getitem)."""
        node = self.node
        return node.op == "call_function" and node.target is not operator.getitem and not is_view(node)


class Program:
    """The triton backend's compiled callable for one graph."""

    def __init__(
        self,
        placeholders: Sequence[torch.fx.Node],
        steps: Sequence[KernelStep | AtenStep],
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

    def __call__(self, args: list[Any]) -> list[Any]:
        env: dict[torch.fx.Node, Any] = dict(zip(self.placeholders, args))
        args.clear()
        for step, done in zip(self.steps, self.release):
            step.run(env)
            for n in done:
                del env[n]
        return [env[o] if isinstance(o, torch.fx.Node) else o for o in self.outputs]
