"""The ``autograd`` stage's compile-time half."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from conveyor import CompiledFn, DataDependentError, Lowering, Request, StageError, stage_api, stamp
from torch.fx._lazy_graph_module import _use_lazy_graph_module

from conveyor_autograd.checked_backwards import checked_backward_node, eager_lowering
from conveyor_autograd.detach import detached
from conveyor_autograd.grad_mode_ops import with_grad_mode_on
from conveyor_autograd.joint import STAGE, BackwardRaised, fresh_leaves, trace_joint, writing_node
from conveyor_autograd.min_cut import min_cut
from conveyor_autograd.partition import Partitioner, Split, save_eager, split
from conveyor_autograd.runtime import program_function, wrap

PARTITIONERS: dict[str, Partitioner] = {"min_cut": min_cut, "save_eager": save_eager}
AUTO = "auto"  # Note [The partitioner for the backend]


def partitioner_for(request: Request, name: str) -> Partitioner:
    """The partitioner option ``name`` names for ``request``: ``"auto"`` is
    ``min_cut`` where the backend fuses pointwise ops, ``save_eager`` where
    it does not (Note [The partitioner for the backend]).

    Note [The partitioner for the backend]: min_cut saves fewer bytes by
    recomputing pointwise ops (gelu, the residual adds) in the backward. A
    backend that fuses them into the kernels around them (Inductor, Triton)
    recomputes them nearly for free; one that calls each op on its own
    (eager) pays a call per recomputed op on every step: 22 more aten calls,
    45-77 µs, on the 12 blocks of ``benchmarks/overhead.py``'s training row.
    So ``"auto"`` (the default) follows the backend's declaration
    (``StageSpec.fuses_pointwise``, seen as ``request.backend_fuses_pointwise``),
    as AOTAutograd uses its min-cut partitioner for Inductor and the default
    (save what eager saves) partitioner for other backends. An explicit
    ``"min_cut"`` or ``"save_eager"`` wins."""
    if name == AUTO:
        name = "min_cut" if request.backend_fuses_pointwise else "save_eager"
    partitioner = PARTITIONERS.get(name)
    if partitioner is None:
        raise StageError(STAGE, f"unknown partitioner {name!r}; valid: {sorted([AUTO, *PARTITIONERS])}")
    return partitioner


def _needs_grad(request: Request) -> bool:
    return request.grad_enabled and any(isinstance(t, torch.Tensor) and t.requires_grad for t in request.inputs)


def _without_history(compiled: CompiledFn) -> CompiledFn:
    """Note [Nothing to differentiate]: when the joint trace finds no output
    that requires grad (``a.add(1).detach()``), no output has autograd
    history in eager either. The inner stages get an inference request
    (grad off), so a kernel backend compiles it, and it runs
    under ``no_grad``: the graph's ops record nothing, as a rewrite the
    backend may make for grad off (dropping a ``detach``) assumes."""

    def run(args: list[Any]) -> Sequence[Any]:
        with torch.no_grad():
            return compiled(args)

    return stage_api.reducible(run, _without_history, compiled)


def _detached(inputs: tuple[Any, ...], fake_mode: Any) -> tuple[Any, ...]:
    return tuple(detached(inputs, fake_mode))  # Note [Detach below the fake mode]


class Autograd:
    """Trace the joint forward+backward, partition it, and hand the backend
    a forward and a backward request; at run time both run inside one
    ``autograd.Function``. Inference requests (grad off, or no input that
    requires grad) pass through.

    Note [Data-dependent sizes in a backward]: a backward that needs a size
    only the values know (``x[mask] = v``: its gradient indexes with
    ``nonzero(mask)``) cannot be traced into the joint graph on fake tensors
    with static sizes. The program then runs eagerly, with a warning, decided
    when the forward compiles: never an error at backward time.

    Note [Graphs nobody runs]: the joint graph, the partitioned forward and
    backward and the backward's copy for compiled autograd are read, copied
    and stamped but not run here (the backend builds what runs). They are
    made as torch's lazy graph modules (as AOTAutograd makes its graphs),
    whose Python code is generated the first time it is asked for (printed,
    run, pickled), not once per graph the stage builds."""

    def lower(self, request: Request, options: Mapping[str, Any]) -> Lowering:
        partitioner = partitioner_for(request, options["partitioner"])
        if not _needs_grad(request):
            return Lowering.passthrough(request)
        bad = writing_node(request.graph.graph)
        if bad is not None:
            raise StageError(
                STAGE,
                f"the graph writes with {bad.target} ({bad.name}); the autograd stage needs a functional graph "
                "(enable the functionalize stage)",
            )
        checked = checked_backward_node(request.graph)
        if checked is not None:  # Note [Backwards that check their gradient]
            return eager_lowering(request, STAGE, checked)
        with _use_lazy_graph_module(True):  # Note [Graphs nobody runs]
            leaves = fresh_leaves(request.inputs, request.fake_mode)
            try:
                joint = trace_joint(request, leaves)
            except DataDependentError as exc:  # Note [Data-dependent sizes in a backward]
                cause = str(exc).splitlines()[0].removeprefix("capture: ")
                return stage_api.eager_lowering(
                    request, STAGE, f"its backward needs a size that depends on tensor values ({cause})"
                )
            except BackwardRaised as exc:  # Note [Backwards that raise] in joint.py
                return stage_api.eager_lowering(
                    request,
                    STAGE,
                    f"torch's autograd raised while tracing its backward ({exc}); eager raises only when a backward "
                    "runs (Note [Backwards that raise])",
                )
            if joint is None:  # Note [Nothing to differentiate]
                inner = request.replace(grad_enabled=False)
                return Lowering((inner,), _without_history)
            stamp(joint.gm, "joint")  # before partitioning (Note [Stamps] in conveyor.protocol.stamps)
            parts = split(joint, partitioner(joint))
            return lower_split(request, parts, _without_grad(leaves))


def _without_grad(leaves: list[Any]) -> tuple[Any, ...]:
    """Note [The primals again]: the forward request's inputs are the
    request's inputs detached, which the joint trace's fresh leaves are
    (same storage and metadata, the version counter shared, leaves), once
    they no longer require grad. The trace ran on stand-ins of them and
    left them as they were, so they are taken instead of detaching every
    input once more."""
    for t in leaves:
        if isinstance(t, torch.Tensor) and t.requires_grad:
            t.requires_grad_(False)
    return tuple(leaves)


def lower_split(request: Request, parts: Split, forward_inputs: tuple[Any, ...] | None = None) -> Lowering:
    """The forward and backward requests of a split, and the run-time wrap.
    ``forward_inputs``: the request's inputs detached, when the caller has
    them (Note [The primals again])."""
    fwd = request.replace(
        graph=with_grad_mode_on(parts.forward),  # it runs with grad mode off (Note [Grad mode in the compiled forward])
        inputs=_detached(request.inputs, request.fake_mode) if forward_inputs is None else forward_inputs,
        grad_enabled=False,
        label="forward",
    )
    bwd_inputs = tuple(
        p.meta["val"] for p in parts.backward.graph.nodes if p.op == "placeholder"
    )
    bwd = Request(
        graph=parts.backward,
        inputs=_detached(bwd_inputs, request.fake_mode),
        fake_mode=request.fake_mode,
        grad_enabled=False,
        label="backward",
    )
    function = program_function(parts.layout, parts.backward)  # Note [Inlined backward] in runtime.py
    return Lowering((fwd, bwd), lambda f, b: wrap(parts.layout, f, b, function))
