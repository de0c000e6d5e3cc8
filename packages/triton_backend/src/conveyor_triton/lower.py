"""From a decomposed graph to a :class:`~conveyor_triton.program.Program`:
classify, fuse, decide what each kernel stores, generate the sources."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
import torch.fx
from conveyor.stage_api import timed_step

from conveyor_triton.aten_step import AtenStep
from conveyor_triton.classify import ARG_REDUCTIONS, REDUCTIONS, SCANS, NodeClass, classify
from conveyor_triton.codegen import KernelSource, StoreStrides, generate, generate_combine
from conveyor_triton.codegen_scatter import generate_scatter
from conveyor_triton.domain import contiguous_strides
from conveyor_triton.dtypes import rounds_explicitly
from conveyor_triton.fusion import Fuser, Group
from conveyor_triton.index_reads import INDEX_READS, IndexBound, index_read
from conveyor_triton.launch import choose, launch_device, split_launches
from conveyor_triton.ops import RULES
from conveyor_triton.program import KernelStep, Program, Variant, needs_index64
from conveyor_triton.report import Fallback, KernelEntry, Report
from conveyor_triton.scatter_step import ScatterStep
from conveyor_triton.scatters import SCATTERS, scatter


def _is_view_member(node: torch.fx.Node) -> bool:
    return node.target not in RULES and node.target not in REDUCTIONS and node.target not in SCANS


def _outside(node: torch.fx.Node, group: Group) -> bool:
    return any(u.op == "output" or u not in group.members for u in node.users)


def _split_stores(group: Group) -> tuple[list[torch.fx.Node], list[torch.fx.Node]]:
    """The members the kernel stores, and the view members taken afterwards
    (as aten views of stored values) for users outside the group."""
    needed: set[torch.fx.Node] = set()
    for node in reversed(list(group.members)):
        if node in needed or _outside(node, group):
            needed.add(node)
            if _is_view_member(node):
                needed.add(node.args[0])  # type: ignore[arg-type]
    stored = [n for n in group.members if n in needed and not _is_view_member(n)]
    post = [n for n in group.members if n in needed and _is_view_member(n)]
    return stored, post


def dense(shape: Sequence[int], stride: Sequence[int]) -> bool:
    """Whether a layout covers its elements exactly once with no gaps."""
    if any(s == 0 for s in shape):
        return True
    expected = 1
    for size, st in sorted((p for p in zip(shape, stride) if p[0] > 1), key=lambda p: p[1]):
        if st != expected:
            return False
        expected *= size
    return True


def _strides(node: torch.fx.Node, output_meta: dict[torch.fx.Node, Any]) -> tuple[int, ...]:
    """Strides for a stored value: the received graph's, for a graph output
    (eager's layout); else the decomposed graph's when dense; else contiguous."""
    val = node.meta["val"]
    for candidate in (output_meta.get(node), val):
        if (
            isinstance(candidate, torch.Tensor)
            and candidate.shape == val.shape
            and all(isinstance(s, int) for s in candidate.stride())
            and dense(candidate.shape, candidate.stride())
        ):
            return tuple(candidate.stride())
    return tuple(contiguous_strides(tuple(val.shape)))


def _static_kernels(
    group: Group, stored: list[torch.fx.Node], name: str, store_strides: StoreStrides, launch_for: str | None
) -> dict[Variant, KernelSource]:
    """The static kernel of ``group`` (Note [Static layouts]), with 64-bit
    indexing when a tensor it addresses, or its index space, needs it; its
    launch chosen for the device type ``launch_for`` (None: its tensors').
    A split reduction's two kernels are ``"static"`` and ``"combine"`` (Note
    [Split reductions])."""
    xnumel = group.rows if group.reduce is not None else group.numel
    device = launch_device(launch_for, stored[0].meta["val"].device)
    launch = choose(device, xnumel, group.reduce, outer=group.perm is not None)  # type: ignore[arg-type]
    kernel = generate(group, stored, name, False, launch, store_strides)
    layouts = [a.layout for a in (*kernel.loads, *kernel.stores) if a.layout is not None]
    index64 = needs_index64(group.numel, layouts)
    fp_fusion = not rounds_explicitly(kernel.source)  # Note [Explicit roundings and FMA]
    split = split_launches(device, launch, xnumel, group.reduce) if _splittable(group, stored) else None  # type: ignore[arg-type]
    if split is not None and not index64:
        first, second = (dataclasses.replace(la, fp_fusion=fp_fusion) for la in split)
        return {
            "static": generate(group, stored, name, False, first, store_strides),
            "combine": generate_combine(group, stored, f"{name}_combine", second, first, store_strides),
        }
    if index64:
        kernel = generate(group, stored, name, True, launch, store_strides)
    if not fp_fusion:
        kernel = dataclasses.replace(kernel, launch=dataclasses.replace(launch, fp_fusion=False))
    return {"static": kernel}


def _bound(node: torch.fx.Node) -> IndexBound:
    """The range the index of index read ``node`` must keep (Note [Indexes
    out of range] in ``conveyor_triton.index_reads``)."""
    read = index_read(node)
    return IndexBound(read.index, int(read.source.meta["val"].shape[read.dim]), read.wraps)


def _splittable(group: Group, stored: list[torch.fx.Node]) -> bool:
    """Whether every value ``group`` stores is a reduction whose source reads no
    reduction of the group (Note [Split reductions]: a chunk's partial result
    must not feed anything but the second kernel); never a group with an
    ``argmax`` / ``argmin``, whose partial results would be (value, index)
    pairs (Note [Arg reductions] in ``conveyor_triton.codegen_reduce``)."""
    if group.reduce is None or not all(n.target in REDUCTIONS for n in stored):
        return False
    if any(REDUCTIONS.get(n.target) in ARG_REDUCTIONS or n.target in SCANS for n in group.members):
        return False  # a scan's chunk would start from zero
    for node in group.members:
        if node.target in REDUCTIONS and _reads_a_reduction(node.args[0], group):  # type: ignore[arg-type]
            return False
    return True


def _reads_a_reduction(node: torch.fx.Node, group: Group) -> bool:
    seen: set[torch.fx.Node] = set()
    stack = [node]
    while stack:
        n = stack.pop()
        if n in seen or n not in group.members:
            continue
        seen.add(n)
        if n.target in REDUCTIONS:
            return True
        stack.extend(n.all_input_nodes)
    return False


_ATEN = NodeClass("fallback", "an aten call")


def _scatter_step(
    node: torch.fx.Node,
    name: str,
    strides: tuple[int, ...],
    cache_dir: Path | None,
    options: dict[str, Any],
    static: bool,
) -> ScatterStep:
    """The step of scatter ``node`` (Note [Scatters] in ``conveyor_triton.scatters``),
    with its kernel for the graph's layouts."""
    s = scatter(node)
    sources = [s.index, *([s.source] if isinstance(s.source, torch.fx.Node) else [])]
    layouts = (
        (tuple(node.meta["val"].shape), strides),
        *((tuple(t.meta["val"].shape), tuple(t.meta["val"].stride())) for t in sources),
    )
    device = launch_device(options.get("launch_for"), node.meta["val"].device)
    kernel = generate_scatter(s, name, layouts, device)
    return ScatterStep(
        node,
        s,
        name,
        kernel,
        cache_dir,
        strides,
        bool(options.get("log")),
        options.get("launch_for"),
        static,
        autotune=bool(options.get("autotune", True)),
    )


def _short(node: torch.fx.Node) -> str:
    name = getattr(node.target, "__name__", str(node.target))
    return name.split(".")[0].strip("_")


def lower(
    gm: torch.fx.GraphModule,
    received_outputs: Sequence[Any],
    label: str,
    options: dict[str, Any],
    notes: Sequence[str] = (),
    *,
    input_aliasing: Sequence[Sequence[torch.fx.Node]] | None = None,
    static: bool = True,
) -> Program:
    """Build the program for ``gm``.

    :param received_outputs: the fake output values of the graph the backend
        received, by output position (their strides are eager's).
    :param input_aliasing: groups of placeholders of ``gm`` that may alias
        (``conveyor_alias_db.input_aliasing``); None: any input may alias any other.
        The fuser asks its own ``AliasDb`` which nodes keep their memory order
        (Note [Fusion in the AliasDb] in ``conveyor_triton.record``).
    :param static: generate static kernels, sizes and strides constants of
        the source (Note [Static layouts] in ``conveyor_triton.codegen``);
        False: generic kernels only (the per-size programs of a symbolic graph).
    """
    graph = gm.graph
    classes: dict[torch.fx.Node, NodeClass] = {n: classify(n) for n in graph.nodes if n.op == "call_function"}
    with timed_step("fuse"):  # Note [Compile timings] in conveyor.protocol.timings
        fuser = Fuser(graph, classes, input_aliasing)  # its AliasDb is updated in place at every merge
        order = fuser.order()
    output_node = next(n for n in graph.nodes if n.op == "output")
    outputs = list(output_node.args[0]) if isinstance(output_node.args[0], (list, tuple)) else [output_node.args[0]]
    output_meta: dict[torch.fx.Node, Any] = {}
    for o, received in zip(outputs, received_outputs):
        if isinstance(o, torch.fx.Node):
            output_meta.setdefault(o, received)
    cache_dir = Path(options["cache_dir"]) if options.get("cache_dir") else None

    steps: list[KernelStep | AtenStep | ScatterStep] = []
    kernels: list[KernelEntry] = []
    fallbacks: list[Fallback] = []
    views = 0
    for index in order:
        step = fuser.steps[index]
        if step.kind == "input":
            continue
        if step.kind == "aten" and step.node is not None and classes.get(step.node, _ATEN).category == "scatter":
            name = f"k{len(kernels)}_{SCATTERS[step.node.target]}"
            scattering = _scatter_step(step.node, name, _strides(step.node, output_meta), cache_dir, options, static)
            steps.append(scattering)
            kernels.append(KernelEntry(name, (step.node.name,), "scatter", scattering.kernel.source))
            continue
        if step.kind in ("view", "aten"):
            node = step.node
            assert node is not None
            if step.kind == "view" and node in fuser.group_of:
                continue  # moved into a group (Note [Index producers] in conveyor_triton.index_reads)
            steps.append(AtenStep(node, gm))
            if step.kind == "view":
                views += 1
            elif node.op == "call_function":
                cls = classes[node]
                fallbacks.append(Fallback(node.name, str(node.target), cls.reason))
            continue
        group = step.group
        assert group is not None
        stored, post = _split_stores(group)
        if not stored:
            continue
        ops = [_short(n) for n in group.members if not _is_view_member(n)]
        name = f"k{len(kernels)}_" + "_".join(dict.fromkeys(ops[:4]))
        store_strides = {n: _strides(n, output_meta) for n in stored}
        with timed_step("codegen"):
            sources: dict[Variant, KernelSource] = {
                "generic": generate(group, stored, name, False),
                "generic64": generate(group, stored, name, True),
            }
            if static:
                sources.update(_static_kernels(group, stored, name, store_strides, options.get("launch_for")))
        strides = tuple(store_strides[a.node] for a in sources["generic"].stores)
        steps.append(
            KernelStep(
                sources,
                strides,
                tuple(post),
                cache_dir,
                bool(options.get("poison")),
                bool(options.get("log")),
                members=tuple(group.members),
                launch_for=options.get("launch_for"),
                autotune=bool(options.get("autotune", True)),
                bounds=tuple(_bound(n) for n in group.members if n.op == "call_function" and n.target in INDEX_READS),
            )
        )
        kind = "reduction" if group.reduce is not None else "pointwise"
        kernels.append(
            KernelEntry(
                name, tuple(n.name for n in group.members), kind, sources.get("static", sources["generic"]).source
            )
        )
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    report = Report(label, tuple(kernels), tuple(fallbacks), views, tuple(notes))
    return Program(placeholders, steps, outputs, report)
