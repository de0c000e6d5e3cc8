"""Ops whose forward result depends on grad mode, made independent of it.

Note [Grad mode in the compiled forward]: the compiled forward graph runs
inside ``autograd.Function.forward``, where grad mode is off. oneDNN's LSTM
layer (``aten.mkldnn_rnn_layer``, what ``nn.LSTM`` runs on CPU) returns the
workspace its backward reads only when grad mode is on; with grad mode off the
workspace is undefined, and the backward fails with "Expected a proper Tensor
but got None (or an undefined Tensor in C++) for argument #22 'workspace'".
In the forward graph each such node calls an op of this package instead, with
the same schema, that runs the aten op with grad mode on (as eager does) on
detached inputs, so that nothing is recorded.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx

aten = torch.ops.aten

_LIB = torch.library.Library("conveyor_autograd", "DEF")  # kept alive for the process


def _with_grad_mode_on(op: torch._ops.OpOverload) -> Any:
    def run(*args: Any) -> Any:
        detached = [a.detach() if isinstance(a, torch.Tensor) else a for a in args]
        with torch.enable_grad():
            return op(*detached)

    return run


def _define(op: torch._ops.OpOverload, name: str) -> torch._ops.OpOverload:
    schema = str(op._schema)
    _LIB.define(name + schema[schema.index("(") :])
    _LIB.impl(name, _with_grad_mode_on(op), "CompositeExplicitAutograd")
    torch.library.register_fake(f"conveyor_autograd::{name}", lambda *args: op(*args), lib=_LIB)
    return getattr(torch.ops.conveyor_autograd, name).default


#: aten op -> the same op run with grad mode on (Note [Grad mode in the compiled forward])
GRAD_MODE_ON: dict[torch._ops.OpOverload, torch._ops.OpOverload] = {
    aten.mkldnn_rnn_layer.default: _define(aten.mkldnn_rnn_layer.default, "mkldnn_rnn_layer_grad_mode_on"),
}


def with_grad_mode_on(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``gm`` (a forward graph, changed in place) with every op of
    :data:`GRAD_MODE_ON` replaced by its grad-mode-on counterpart."""
    changed = False
    for node in gm.graph.nodes:
        if node.op == "call_function" and node.target in GRAD_MODE_ON:
            node.target = GRAD_MODE_ON[node.target]
            changed = True
    if changed:
        gm.recompile()
    return gm
