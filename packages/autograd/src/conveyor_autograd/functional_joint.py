"""Note [Functional joint]: the graph the stage receives is functional, but a
few backward formulas write into buffers they create (``as_strided``'s
backward copies into a zero-filled tensor). Partitioning needs a graph without
writes, so such a joint graph is traced once more, run node by node under
``torch.func.functionalize``, which keeps its values and drops the writes.

The new nodes keep the forward-phase tag (Note [Forward phase] in
``joint.py``) of the node whose run created them. Forward ops are functional
already and are replayed as they are; writes only come from backward
formulas, so what functionalization emits for them is backward-phase too.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.fx
from conveyor import retrace
from torch.fx.experimental.proxy_tensor import get_proxy_mode

PHASE = "conveyor_autograd_forward"


class _PhaseCarrier(torch.fx.Interpreter):
    """Runs a joint graph; tags the nodes each run creates in the tracer's
    graph with the forward-phase tag of the node being run."""

    def run_node(self, n: torch.fx.Node) -> Any:
        mode = get_proxy_mode()
        graph = mode.tracer.graph if mode is not None else None
        last = next(iter(reversed(graph.nodes)), None) if graph is not None else None
        out = super().run_node(n)
        if graph is not None and n.meta.get(PHASE, False):
            node = graph._root.prev
            while node is not last and node is not graph._root:
                if node.op != "placeholder":
                    node.meta[PHASE] = True
                node = node.prev
        return out


def functional_joint(gm: torch.fx.GraphModule, fakes: Sequence[Any], fake_mode: Any) -> torch.fx.GraphModule:
    """``gm`` traced again without writes (see the module docstring)."""

    def run(*args: Any) -> Any:
        return tuple(_PhaseCarrier(gm).run(*args))

    with torch.no_grad():
        return retrace(torch.func.functionalize(run, remove="mutations"), fakes, fake_mode)
