"""Training a program on tensor subclasses: the backward traced at the
subclass level.

Note [Subclass programs in training]: a subclass's own autograd decides what
its backward does. ``DTensor``'s ``from_local`` / ``to_local`` /
``redistribute`` are autograd Functions whose backward redistributes the
gradient according to its placements (an all-reduce where a replicated
input's gradient arrives partial): nothing in the inner graph's aten ops says
so, so differentiating the inner graph would train wrongly. As AOTAutograd
does, conveyor traces the backward with the subclass's autograd: the program
runs on subclass leaves rebuilt from the traced inner tensors, and
``torch.autograd.grad`` at the subclass level records every collective the
backward needs. The result is two value-only graphs over inner tensors,
each compiled by the whole pipeline:

- the forward (traced under ``no_grad``: it computes values only);
- the backward: the forward again, then the gradients of the inputs that
  require grad, from the inputs and the gradients of the outputs (the
  forward is recomputed, as under activation checkpointing, rather than
  saved).

At run time one ``autograd.Function`` takes the subclass inputs and returns
the subclass outputs; its backward brings each incoming gradient to the
forward output's metadata (``__coerce_same_metadata_as_tangent__``),
flattens it, runs the backward graph and rebuilds each input's gradient with
the metadata it had in the trace (a ``DTensor`` gradient keeps the placements
eager gives it). A training program that writes to its inputs (running
statistics) runs eagerly with a warning: the recomputing backward would write
twice.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from conveyor.analysis.grad_regions import trace_below_autograd
from conveyor.errors import ConveyorError
from conveyor.frontend.capture import Traced
from conveyor.frontend.subclasses import (
    Boundary,
    SubclassMeta,
    flat_outer,
    meta_of,
    outer_inputs,
    rebuild,
)
from conveyor.protocol.pipeline import Pipeline
from conveyor.protocol.stage import CompiledFn, Request
from conveyor.runtime import disk_cache
from conveyor.runtime.stored_graphs import Graphs


@dataclass(frozen=True)
class Backward:
    """What the traced backward takes and gives, found while tracing it.

    :ivar differentiable: per outer output, whether it requires grad.
    :ivar grads: per outer input, ``None`` (no gradient: not requiring grad,
        or unused) or how to rebuild its gradient (``None`` metadata: a plain
        tensor) as a one-element tuple.
    :ivar tangent_shapes: per inner output, the shape, dtype and device of
        its gradient (zeros where none arrives).
    """

    differentiable: tuple[bool, ...]
    grads: tuple[tuple[SubclassMeta | None] | None, ...]
    tangent_shapes: tuple[tuple[torch.Size, torch.dtype, torch.device], ...]


def trace_backward(
    boundary: Boundary, forward: torch.fx.GraphModule, fake_mode: Any
) -> tuple[torch.fx.GraphModule, tuple[Any, ...], Backward]:
    """The backward graph of a training subclass program: its inputs are the
    forward's inner inputs, then one gradient per inner output; its outputs
    the inner tensors of every gradient the inputs receive."""
    assert boundary.program is not None
    program = boundary.program
    inner_in = [n.meta["val"] for n in forward.graph.nodes if n.op == "placeholder"]
    out_node = next(n for n in forward.graph.nodes if n.op == "output")
    inner_out = [a.meta["val"] for a in out_node.args[0]]
    with fake_mode:
        tangents = [torch.empty_like(t) for t in inner_out]
    found: dict[str, Any] = {}
    n_in = len(inner_in)

    def backward(*args: Any) -> tuple[torch.Tensor, ...]:
        inner, grads_out = args[:n_in], args[n_in:]
        with torch.enable_grad():
            leaves = [
                x.detach().requires_grad_() if rg else x
                for x, rg in zip(outer_inputs(boundary, inner), boundary.requires_grad, strict=True)
            ]
            outs = program(*leaves)
            diff = tuple(isinstance(o, torch.Tensor) and o.requires_grad for o in outs)
            pairs = [(o, t) for o, t, d in zip(outs, rebuild(boundary.outputs, grads_out), diff, strict=True) if d]
            wrt = [x for x, rg in zip(leaves, boundary.requires_grad, strict=True) if rg]
            grads = torch.autograd.grad([o for o, _ in pairs], wrt, [t for _, t in pairs], allow_unused=True)
        it = iter(grads)
        per_input = [next(it) if rg else None for rg in boundary.requires_grad]
        found["diff"] = diff
        found["grads"] = tuple(None if g is None else (meta_of(g),) for g in per_input)
        return tuple(flat_outer([g for g in per_input if g is not None]))

    graph = trace_below_autograd(backward, tag_grad_mode=False)(*inner_in, *tangents)
    plan = Backward(found["diff"], found["grads"], tuple((t.shape, t.dtype, t.device) for t in inner_out))
    return graph, (*inner_in, *tangents), plan


def training_program(boundary: Boundary, plan: Backward, forward: CompiledFn, backward: CompiledFn) -> CompiledFn:
    """The run-time callable: one autograd Function over the subclass inputs."""

    def run(args: list[Any]) -> Sequence[Any]:
        return _Program.apply(boundary, plan, forward, backward, *args)  # type: ignore[no-any-return]

    return run


class _Program(torch.autograd.Function):
    @staticmethod
    def forward(  # type: ignore[override]
        ctx: Any, boundary: Boundary, plan: Backward, forward: CompiledFn, backward: CompiledFn, *args: Any
    ) -> tuple[Any, ...]:
        inner = _inner_inputs(boundary, args)
        ctx.boundary, ctx.plan, ctx.backward = boundary, plan, backward
        ctx.save_for_backward(*[t for t in inner if isinstance(t, torch.Tensor)])
        ctx.inner_layout = [isinstance(t, torch.Tensor) for t in inner]
        ctx.others = [t for t in inner if not isinstance(t, torch.Tensor)]
        outs = boundary.outer_outputs(list(forward(inner)))
        ctx.mark_non_differentiable(
            *[o for o, d in zip(outs, plan.differentiable, strict=True) if isinstance(o, torch.Tensor) and not d]
        )
        return tuple(outs)

    @staticmethod
    @torch.autograd.function.once_differentiable  # the compiled backward records no graph of its own
    def backward(ctx: Any, *grads: Any) -> Any:  # type: ignore[override]
        boundary: Boundary = ctx.boundary
        plan: Backward = ctx.plan
        saved, others = iter(ctx.saved_tensors), iter(ctx.others)
        inner = [next(saved) if is_tensor else next(others) for is_tensor in ctx.inner_layout]
        tangents = _inner_tangents(boundary, plan, grads)
        flat = list(ctx.backward([*inner, *tangents]))
        out: list[Any] = [None] * 4
        i = 0
        for meta in plan.grads:
            if meta is None:
                out.append(None)
            elif meta[0] is None:
                out.append(flat[i])
                i += 1
            else:
                n = len(meta[0].attrs)
                out.append(meta[0].rebuild(flat[i : i + n]))
                i += n
        return tuple(out)


def _inner_inputs(boundary: Boundary, args: Sequence[Any]) -> list[Any]:
    inner: list[Any] = []
    for meta, x in zip(boundary.inputs, args, strict=True):
        if meta is None:
            inner.append(x.detach() if isinstance(x, torch.Tensor) else x)
        else:
            inner.extend(getattr(x, a).detach() for a in meta.attrs)
    return inner


def _inner_tangents(boundary: Boundary, plan: Backward, grads: Sequence[Any]) -> list[torch.Tensor]:
    shapes = iter(plan.tangent_shapes)
    tangents: list[torch.Tensor] = []
    for meta, grad, diff in zip(boundary.outputs, grads, plan.differentiable, strict=True):
        width = 1 if meta is None else len(meta.attrs)
        parts = [next(shapes) for _ in range(width)]
        if grad is None or not diff:
            tangents.extend(torch.zeros(s, dtype=d, device=dev) for s, d, dev in parts)
            continue
        if meta is None:
            tangents.append(grad)
            continue
        coerce = getattr(grad, "__coerce_same_metadata_as_tangent__", None)
        if coerce is not None:
            grad = coerce(meta.context) or grad
        if type(grad) is not meta.cls:
            raise ConveyorError(
                f"subclasses: the gradient of a {meta.cls.__qualname__} output is a {type(grad).__qualname__}, "
                "which conveyor cannot flatten into the compiled backward's inputs"
            )
        tangents.extend(getattr(grad, a) for a in meta.attrs)
    return tangents


def compile_program(
    pipeline: Pipeline, traced: Traced, fakes: Sequence[Any], fake_mode: Any
) -> tuple[CompiledFn, Graphs]:
    """Compile a traced program for the fake (outer) inputs it was captured
    for: as it is without tensor subclasses; over their inner tensors with
    subclasses rebuilt around it (Note [Tensor subclasses]); as a forward and
    a backward traced at the subclass level when it trains (Note [Subclass
    programs in training])."""
    if not (torch.is_autocast_enabled("cpu") or torch.is_autocast_enabled("cuda")):
        return _compile_program(pipeline, traced, fakes, fake_mode)
    with torch._C._DisableAutocast():  # Note [The graph runs below autocast]
        compiled, graphs = _compile_program(pipeline, traced, fakes, fake_mode)
    return _autocast_off(compiled), graphs


# Note [The graph runs below autocast]: a program captured under autocast holds
# autocast's casts as ops of its graph (the trace ran through autocast), and a
# region where the program turned autocast off (``torch.autocast("cpu",
# enabled=False)``) holds none. Run again under the caller's autocast, the
# graph's ops were cast a second time: the region's float32 ``mm`` came back
# bfloat16; and a stage that traces the graph again (the autograd stage's joint
# trace) cast them while compiling. So, as AOTAutograd does, a program captured
# under autocast (the state is part of every cache key) is compiled and run with
# autocast off.
def _autocast_off(compiled: CompiledFn) -> CompiledFn:
    def run(args: list[Any]) -> Any:
        with torch._C._DisableAutocast():
            return compiled(args)

    return run


def _compile_program(
    pipeline: Pipeline, traced: Traced, fakes: Sequence[Any], fake_mode: Any
) -> tuple[CompiledFn, Graphs]:
    graph, boundary = traced.graph, traced.boundary
    if boundary is None:  # kept on disk too (conveyor.runtime.disk_cache); subclass programs are not
        request = Request(graph, tuple(fakes), fake_mode, torch.is_grad_enabled())
        return disk_cache.compile_cached(pipeline, request, pipeline.compile)
    inner = tuple(n.meta["val"] for n in graph.graph.nodes if n.op == "placeholder")
    if boundary.program is None:
        compiled, graphs = pipeline.compile(Request(graph, inner, fake_mode, torch.is_grad_enabled()))
        return boundary.wrap(compiled), graphs
    forward, graphs = pipeline.compile(Request(graph, inner, fake_mode, False))
    with fake_mode:
        backward_graph, backward_inputs, plan = trace_backward(boundary, graph, fake_mode)
    backward, backward_graphs = pipeline.compile(
        Request(backward_graph, backward_inputs, fake_mode, False, label="backward")
    )
    return training_program(boundary, plan, forward, backward), (*graphs, *backward_graphs)
