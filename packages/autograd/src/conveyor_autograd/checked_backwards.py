"""Ops whose eager backward checks the incoming gradient: run eagerly.

Note [Backwards that check their gradient]: eager's backward of
``linalg_eig`` (and of ``linalg_eigh`` and ``linalg_svd`` on complex inputs)
raises when the loss depends on the eigenvectors' (singular vectors') phase,
which is arbitrary: "The eigenvectors in the complex case are specified up to
multiplication by e^{i phi}. The specified loss function depends on this
quantity, so it is ill-defined." Torch skips that check when the tensors are
subclass-like (``isTensorSubclassLike``: fake and functional tensors), so a
backward traced from the same formula has no check, and the compiled program
returns a gradient where eager raises. A program with such an op, when it
needs gradients, runs the functional graph eagerly (eager's autograd, its
checks included), with a warning; in inference it compiles as usual.
"""

from __future__ import annotations

import torch
import torch.fx
from conveyor import Lowering, Request, stage_api

aten = torch.ops.aten

#: packet -> whether its check applies only to complex inputs
_CHECKED = {aten.linalg_eig: False, aten._linalg_eigh: True, aten._linalg_svd: True}


def checked_backward_node(graph: torch.fx.GraphModule) -> torch.fx.Node | None:
    """The first node whose eager backward checks its gradient (Note
    [Backwards that check their gradient]), if any."""
    for node in graph.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        complex_only = _CHECKED.get(node.target.overloadpacket)
        if complex_only is None:
            continue
        first = node.args[0] if node.args else None
        val = first.meta.get("val") if isinstance(first, torch.fx.Node) else None
        if not complex_only or not isinstance(val, torch.Tensor) or val.is_complex():
            return node
    return None


def eager_lowering(request: Request, stage: str, node: torch.fx.Node) -> Lowering:
    """Run ``request``'s graph on the caller's tensors with eager's autograd,
    with a warning naming ``node``; the next stage gets a graph that returns
    nothing."""
    return stage_api.eager_lowering(
        request,
        stage,
        f"eager's backward of {node.target} checks the gradient it gets (it raises for a loss that depends on "
        "the vectors' phase); a traced backward has no such check (Note [Backwards that check their gradient])",
    )
