"""The ``triton`` backend: decompose, fuse, generate kernels, fall back to aten."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from conveyor import CompiledFn, Request, StageError, stamp
from conveyor.stage_api import timed_step

from conveyor_triton import interpreter
from conveyor_triton.classify import writes
from conveyor_triton.cuda_graphs import GraphedProgram, graphs_apply
from conveyor_triton.decompose import decompose
from conveyor_triton.kernel_graph import kernel_graph
from conveyor_triton.lower import lower
from conveyor_triton.specialize import PerSizes, is_symbolic
from conveyor_triton.stage import OPTIONS, STAGE

__all__ = ["OPTIONS", "STAGE", "TritonBackend"]


def _received_outputs(request: Request) -> list[Any]:
    output = next(n for n in request.graph.graph.nodes if n.op == "output")
    args = output.args[0] if isinstance(output.args[0], (list, tuple)) else [output.args[0]]
    return [a.meta.get("val") if isinstance(a, torch.fx.Node) else a for a in args]


class TritonBackend:
    """Compiles a request's graph into a :class:`~conveyor_triton.program.Program`.

    It stamps (Note [Stamps] in ``conveyor.protocol.stamps``) the graph it lowered,
    after its decompositions, with the program as the stamp's artifact (what
    :func:`conveyor_triton.programs` and :func:`conveyor_triton.reports`
    find), and the ``"kernels"`` step: that graph with each fusion group
    folded into one kernel call (:mod:`conveyor_triton.kernel_graph`). A
    symbolically sized graph is lowered per size at run time (Note [Symbolic
    sizes in the triton backend]): its stamp is the graph it received, with
    the :class:`~conveyor_triton.specialize.PerSizes` as artifact."""

    def compile(self, request: Request, options: Mapping[str, Any], *, per_size: bool = False) -> CompiledFn:
        """:param per_size: ``request`` is one size of a symbolic graph (its
        kernels are generic, shared by every size)."""
        tensors = [t for t in request.inputs if isinstance(t, torch.Tensor)]
        needs_history = request.grad_enabled and any(t.requires_grad for t in tensors)
        interpreter.prepare({t.device for t in tensors}, STAGE)
        if is_symbolic(request):  # Note [Symbolic sizes in the triton backend]
            per_sizes = PerSizes(request, lambda static: self.compile(static, options, per_size=True))
            stamp(request.graph, artifact=per_sizes)
            return per_sizes
        notes: list[str] = []
        aliasing = None
        mutating = any(writes(n) for n in request.graph.graph.nodes if n.op == "call_function")
        if mutating:
            gm = request.graph
            aliasing = _storage_groups(gm, request.program.aliasing.groups)  # the record's (declared)
            notes.append("graph writes to tensors: not decomposed; kernels keep memory order (conveyor_alias_db)")
        elif options.get("decompose", True):
            with timed_step("decompose"):  # Note [Compile timings]
                gm, why = decompose(request)
            if why:
                notes.append(why)
        else:
            gm = request.graph
        static = bool(options.get("static_layouts", True)) and not per_size
        graphs = bool(options.get("cuda_graphs", False))
        not_graphed = graphs_apply(request.inputs, mutating, per_size) if graphs else None
        if graphs:  # Note [CUDA graphs]
            notes.append(
                f"cuda_graphs: not recorded: {not_graphed}"
                if not_graphed
                else "cuda_graphs: recorded at the second call"
            )
        program = lower(
            gm, _received_outputs(request), request.label, dict(options), notes, input_aliasing=aliasing, static=static
        )
        if needs_history and program.launches_kernels:
            # aten steps (views, fallbacks) record autograd history; kernels do not. A graph
            # of views only (the autograd stage hands those on as they are) runs as it is.
            raise StageError(
                STAGE,
                "inputs require grad, and generated kernels record no autograd history; "
                "enable the autograd stage (it hands this backend separate forward and backward graphs), "
                "or run under torch.no_grad()",
            )
        stamp(gm, artifact=program)
        stamp(kernel_graph(gm, program), "kernels")
        if graphs and not not_graphed and program.launches_kernels:
            return GraphedProgram(program, request.label)
        return program


def _storage_groups(gm: torch.fx.GraphModule, groups: tuple[int, ...]) -> list[list[torch.fx.Node]]:
    """The placeholders of ``gm`` grouped by the storage their inputs share,
    from the program record's aliasing (``groups[i]``: the first input in
    input ``i``'s storage, ``-1`` for no tensor storage), as the fuser's
    ``AliasDb`` takes them (``conveyor_alias_db.input_aliasing``'s shape)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    by_first: dict[int, list[torch.fx.Node]] = {}
    for node, first in zip(placeholders, groups, strict=True):
        if first >= 0:
            by_first.setdefault(first, []).append(node)
    return list(by_first.values())
