"""Tracing the joint forward+backward program: ``JointGraph``.

The joint function runs the request's graph on the primals (with autograd
recording above the tracer, each node under the grad mode it was captured
under) and then ``torch.autograd.grad`` of the differentiable outputs with
respect to the inputs that require grad, weighted by one tangent per output.
``make_fx`` traces below autograd, so the backward formulas' aten ops land in
the same graph, after the forward's.

A joint graph that writes is made functional (Note [Functional joint] in
``functional_joint.py``).

Every node the forward pass created is tagged (Note [Forward phase]): the
``save_eager`` partitioner saves exactly the forward values the backward
formulas read, as eager autograd does.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, cast

import torch
import torch.fx
from conveyor import ConveyorError, Request, StageError, call_graph, retrace
from conveyor.stage_api import caller_saved_hooks_hidden, writes
from torch.fx.experimental.proxy_tensor import get_proxy_mode

from conveyor_autograd.detach import detached
from conveyor_autograd.functional_joint import PHASE, functional_joint
from conveyor_autograd.layout import InputIdx, OutputIdx
from conveyor_autograd.rewrites import differentiable

STAGE = "autograd"


@dataclass(frozen=True)
class JointGraph:
    """The traced joint program and what each of its placeholders and outputs is.

    :ivar gm: placeholders ``(*primals, *tangent candidates)``; outputs
        ``(*user outputs, *gradients)``.
    :ivar primals: the placeholder of each :data:`InputIdx`.
    :ivar tangents: the tangent placeholder of each of ``diff_outputs``.
    :ivar outputs: the value of each :data:`OutputIdx` (a node, or a constant).
    :ivar grads: the gradient node of each of ``grad_inputs``.
    :ivar grad_inputs: inputs that get a gradient.
    :ivar diff_outputs: outputs that require grad (each gets a tangent).
    :ivar non_differentiable: tensor outputs that do not require grad.
    """

    gm: torch.fx.GraphModule
    primals: tuple[torch.fx.Node, ...]
    tangents: tuple[torch.fx.Node, ...]
    outputs: tuple[Any, ...]
    grads: tuple[torch.fx.Node, ...]
    grad_inputs: tuple[InputIdx, ...]
    diff_outputs: tuple[OutputIdx, ...]
    non_differentiable: tuple[OutputIdx, ...]

    def __post_init__(self) -> None:
        if len(self.tangents) != len(self.diff_outputs):
            raise ValueError(f"JointGraph: {len(self.tangents)} tangents for {len(self.diff_outputs)} differentiable outputs")
        if len(self.grads) != len(self.grad_inputs):
            raise ValueError(f"JointGraph: {len(self.grads)} gradients for {len(self.grad_inputs)} inputs")
        if any(not isinstance(g, torch.fx.Node) for g in self.grads):
            raise ValueError("JointGraph: every gradient must be a graph value")
        object.__setattr__(self, "_primal_set", frozenset(self.primals))

    def is_forward(self, node: torch.fx.Node) -> bool:
        """Note [Forward phase]: the node was created by the forward pass (or
        is a primal), not by a backward formula."""
        return node in self._primal_set or bool(node.meta.get(PHASE, False))  # type: ignore[attr-defined]


def writing_node(graph: torch.fx.Graph) -> torch.fx.Node | None:
    """The first node that writes into one of its arguments, if any."""
    return next((node for node in graph.nodes if writes(node)), None)


def _is_differentiable_dtype(v: Any) -> bool:
    return isinstance(v, torch.Tensor) and (v.is_floating_point() or v.is_complex())


def fresh_leaves(inputs: Sequence[Any], fake_mode: Any) -> list[Any]:
    """Note [Fresh primals]: a request's fake inputs may be non-leaves (they
    describe the caller's tensors, history included). Differentiating with
    respect to them would follow that history into other inputs. The joint trace uses detached leaves with the same storage,
    metadata and ``requires_grad`` instead."""
    leaves = detached(inputs, fake_mode)  # Note [Detach below the fake mode]
    with fake_mode, torch.no_grad():
        return [
            d.requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor) else d
            for d, t in zip(leaves, inputs, strict=True)
        ]


class BackwardRaised(Exception):
    """Note [Backwards that raise]: torch's autograd raised while the joint
    trace ran the program's backward: a derivative torch does not implement
    (``floor_divide``, ``a // b`` with ``a`` requiring grad), a backward that
    returns a gradient of the wrong shape (``scatter`` with an ``src`` that
    requires grad and is larger than the index), or one that fake tensors
    cannot run. Eager runs such a forward and raises only if a backward
    runs (never, for a program used without one), so the program runs
    eagerly, with a warning: eager's forward, and eager's error at eager's
    time. AOTAutograd raises at the call instead. (An error that says a size
    depends on values is still ``retrace``'s ``DataDependentError``, which
    reads the chain: Note [Data-dependent sizes in a backward].)"""


def _tag_forward_nodes() -> None:
    mode = get_proxy_mode()
    if mode is None:
        raise StageError(STAGE, "the joint trace lost its tracer")
    for node in mode.tracer.graph.nodes:
        if node.op != "placeholder":
            node.meta[PHASE] = True


def _no_compiled_autograd() -> Any:
    """Note [Joint trace under compiled autograd]: the joint trace runs
    ``torch.autograd.grad`` at compile time. When a ``.backward()`` runs under
    torch's compiled autograd (``conveyor_compiled_autograd.enable``, or
    ``torch._dynamo.compiled_autograd._enable``) and the forward compiles
    inside it, that engine call would itself be captured and compiled as if it
    were the user's backward. AOTAutograd turns compiled autograd off around
    the same call; so do we."""
    from torch._dynamo import compiled_autograd

    return compiled_autograd._disable()


def _drop_tangent_writes(gm: torch.fx.GraphModule, n: int) -> None:
    """Note [Writes into incoming gradients]: a custom Function's backward
    may write into the gradient it is handed (``grad1.copy_(grad2)``, PyTorch's
    ``test_autograd_function_tangent_mutation``). Functionalizing the joint
    keeps the value it returns and re-applies the write to the tangent
    placeholder at the end, a write the partition refuses. Nothing reads a
    tangent after the backward (the engine's buffer is dropped), so that last
    write goes. Inexact where eager is finer: a ``gradient=`` tensor the user
    passed to ``backward()`` and reads again afterwards is left unchanged."""
    placeholders = [p for p in gm.graph.nodes if p.op == "placeholder"]
    tangents = set(placeholders[n:])
    dropped = False
    for node in list(gm.graph.nodes):
        if node.target is torch.ops.aten.copy_.default and node.args[0] in tangents and not node.users:
            gm.graph.erase_node(node)
            dropped = True
    if dropped:
        gm.recompile()


def trace_joint(request: Request, primal_fakes: list[Any] | None = None) -> JointGraph | None:
    """Trace the joint program of ``request``; ``None`` when no output
    requires grad (there is nothing to differentiate). ``primal_fakes``:
    the request's :func:`fresh_leaves`, when the caller made them (the
    trace leaves them as they are); made here otherwise."""
    graph = differentiable(request.graph)
    out_args: Sequence[Any] = graph.graph.output_node().args[0]  # type: ignore[assignment]
    out_vals: list[Any] = [a.meta.get("val") if isinstance(a, torch.fx.Node) else a for a in out_args]
    candidates = [OutputIdx(k) for k, v in enumerate(out_vals) if _is_differentiable_dtype(v)]
    with request.fake_mode:  # contiguous tangents: the run time makes incoming gradients so
        tangent_fakes = [torch.empty(v.shape, dtype=v.dtype, device=v.device) for v in (out_vals[k] for k in candidates)]
    if primal_fakes is None:
        primal_fakes = fresh_leaves(request.inputs, request.fake_mode)
    wrt = [InputIdx(i) for i, t in enumerate(primal_fakes) if isinstance(t, torch.Tensor) and t.requires_grad]
    n = len(primal_fakes)
    found: dict[str, Any] = {}

    def joint(*flat: Any) -> tuple[Any, ...]:
        primals, tangents = flat[:n], flat[n:]
        outs = call_graph(graph, primals)
        _tag_forward_nodes()
        diff = [k for k in candidates if outs[k].requires_grad]
        found["diff"] = tuple(diff)
        found["non_diff"] = tuple(
            OutputIdx(k) for k, o in enumerate(outs) if isinstance(o, torch.Tensor) and not o.requires_grad
        )
        if not diff:
            return tuple(outs)
        with _no_compiled_autograd():  # Note [Joint trace under compiled autograd]
            try:
                grads = torch.autograd.grad(
                    [outs[k] for k in diff],
                    [primals[i] for i in wrt],
                    [tangents[candidates.index(k)] for k in diff],
                    allow_unused=True,
                )
            except ConveyorError:
                raise
            except Exception as exc:  # Note [Backwards that raise]; a data-dependent size stays retrace's
                raise BackwardRaised(f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}") from exc
        found["grad_inputs"] = tuple(i for i, g in zip(wrt, grads, strict=True) if g is not None)
        return (*outs, *(g for g in grads if g is not None))

    with torch.enable_grad(), caller_saved_hooks_hidden():  # Note [Saved-tensor hooks while tracing]
        gm = retrace(joint, [*primal_fakes, *tangent_fakes], request.fake_mode)
        if not found["diff"]:
            return None
        if writing_node(gm.graph) is not None:  # Note [Functional joint]
            gm = functional_joint(gm, [*primal_fakes, *tangent_fakes], request.fake_mode)
            _drop_tangent_writes(gm, n)
    bad = writing_node(gm.graph)
    if bad is not None:
        raise StageError(STAGE, f"the joint forward+backward graph writes with {bad.target}; cannot partition it")
    # Note [Dead nodes of the joint graph]: they stay. The partitioners and
    # split read only the ancestors of the outputs and gradients, and the
    # forward's random and effectful nodes, which dead-code elimination keeps
    # too (``must_keep``); a pass over the graph for nothing (4.5 ms on RegNet).
    placeholders = [p for p in gm.graph.nodes if p.op == "placeholder"]
    results = cast(Sequence[Any], gm.graph.output_node().args[0])
    return JointGraph(
        gm=gm,
        primals=tuple(placeholders[:n]),
        tangents=tuple(placeholders[n + candidates.index(k)] for k in found["diff"]),
        outputs=tuple(results[: len(out_args)]),
        grads=tuple(results[len(out_args) :]),
        grad_inputs=found["grad_inputs"],
        diff_outputs=found["diff"],
        non_differentiable=found["non_diff"],
    )
