"""Which inputs the program mutates, from ``conveyor_functionalize.analyze``.

``analyze`` reports mutations per input as seen through that input, which is
what the plan needs, but it refuses inputs that share storage and are mutated
(functionalization treats every input as its own tensor). So it is asked
about independent stand-ins: fake tensors with each input's dtype, sizes,
strides, storage offset, requires_grad and leafness, but a storage of their
own, behind a copy of the graph whose placeholders record the stand-ins.
Functionalization wraps each input separately, so the answer is the same.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.fx
from conveyor import Request
from conveyor_functionalize import analyze

from conveyor_synthetic_base.mapping import OuterIdx
from conveyor_synthetic_base.plan import Mutations


def mutations(request: Request) -> Mutations:
    stand_ins = [_stand_in(v, request.fake_mode) for v in request.inputs]
    meta = analyze(_with_placeholder_values(request.graph, stand_ins), stand_ins, request.fake_mode)
    infos = list(enumerate(meta.inputs))
    return Mutations(
        data=frozenset(OuterIdx(i) for i, info in infos if info.mutates_data),
        metadata=frozenset(OuterIdx(i) for i, info in infos if info.mutates_metadata),
        moves_views=any(_moves_view(n) for n in request.graph.graph.nodes),
    )


#: in-place ops that can point a view at other elements of its storage (as
#: opposed to ``t_``, ``unsqueeze_``... which only reorder its own)
_MOVING = {"as_strided_", "set_", "resize_", "resize_as_"}


def _moves_view(node: torch.fx.Node) -> bool:
    schema = getattr(node.target, "_schema", None)
    return node.op == "call_function" and schema is not None and schema.name.split("::")[-1] in _MOVING


def _stand_in(v: Any, fake_mode: Any) -> Any:
    if not isinstance(v, torch.Tensor) or v.layout is not torch.strided:
        return v
    extent = v.storage_offset() + sum((s - 1) * st for s, st in zip(v.size(), v.stride())) + 1
    with fake_mode, torch.enable_grad():
        storage = torch.empty(max(extent, v.storage_offset()), dtype=v.dtype, device=v.device).untyped_storage()
        t = torch.empty(0, dtype=v.dtype, device=v.device).set_(storage, v.storage_offset(), v.size(), v.stride())
    if not v.requires_grad:
        return t
    if v.is_leaf:
        return t.requires_grad_()
    with fake_mode, torch.enable_grad():
        return t.requires_grad_().as_strided(v.size(), v.stride(), v.storage_offset())


def _with_placeholder_values(graph: torch.fx.GraphModule, values: Sequence[Any]) -> torch.fx.GraphModule:
    """A copy of ``graph`` whose placeholders record ``values``."""
    new = torch.fx.Graph()
    env: dict[torch.fx.Node, torch.fx.Node] = {}
    out = new.graph_copy(graph.graph, env)
    new.output(out)
    for node, value in zip((n for n in new.nodes if n.op == "placeholder"), values):
        node.meta["val"] = value
    return torch.fx.GraphModule(graph, new)
