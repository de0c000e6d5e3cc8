"""Which inputs the program mutates, from the core's program record.

``request.program.meta`` reports mutations per input as seen through that
input (functionalization wraps each input separately, also when inputs share
a storage), which is what the plan needs. The record runs the program on
functional tensors at most once per graph; when this stage has nothing to
merge, the functionalize stage reads the same record and runs nothing more.
"""

from __future__ import annotations

import torch
import torch.fx
from conveyor import Request

from conveyor_synthetic_base.mapping import OuterIdx
from conveyor_synthetic_base.plan import Mutations


def mutations(request: Request) -> Mutations:
    """The inputs whose data and metadata the program mutates, and whether it
    can move a view onto other elements of its storage."""
    infos = list(enumerate(request.program.meta.inputs))
    return Mutations(
        data=frozenset(OuterIdx(i) for i, info in infos if info.mutates_data),
        metadata=frozenset(OuterIdx(i) for i, info in infos if info.mutates_metadata),
        # the record's writing nodes (declared): a move is a write, so no other node is looked at
        moves_views=any(_moves_view(n) for n in request.program.writing_nodes),
    )


#: in-place ops that can point a view at other elements of its storage (as
#: opposed to ``t_``, ``unsqueeze_``... which only reorder its own)
_MOVING = {"as_strided_", "set_", "resize_", "resize_as_"}


def _moves_view(node: torch.fx.Node) -> bool:
    schema = getattr(node.target, "_schema", None)
    return node.op == "call_function" and schema is not None and schema.name.split("::")[-1] in _MOVING
