"""Putting fake inputs back in the state the graph expects.

Note [Fake inputs mutated by capture]: ``make_fx`` runs the user's program on
the very fake tensors it is given, so after capture a fake input on which the
program called ``t_()``, ``unsqueeze_()`` or ``set_()`` has the metadata (or
the storage) it has *after* the program, not before. The placeholder's
``meta["val"]`` still has the metadata and storage the input had on entry.
``restore_inputs`` sets each fake input back to its placeholder's value
before this stage reads or traces anything, so that the analysis and the
functional trace start from the caller's real state. (The better fix is in
core capture; until then this stage protects itself and every stage after it.)
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.fx


def _same_state(t: torch.Tensor, val: torch.Tensor) -> bool:
    return (
        t.untyped_storage()._cdata == val.untyped_storage()._cdata
        and t.size() == val.size()
        and t.stride() == val.stride()
        and t.storage_offset() == val.storage_offset()
    )


def restore_inputs(graph: torch.fx.GraphModule, inputs: Sequence[Any], fake_mode: Any) -> None:
    """Reset each fake tensor input's storage and metadata to its
    placeholder's ``meta["val"]`` where they differ (in place)."""
    placeholders = [n for n in graph.graph.nodes if n.op == "placeholder"]
    for node, t in zip(placeholders, inputs):
        val = node.meta.get("val")
        if not isinstance(t, torch.Tensor) or not isinstance(val, torch.Tensor) or t.layout is not torch.strided:
            continue
        if _same_state(t, val):
            continue
        with torch.no_grad(), fake_mode:
            t.set_(val.untyped_storage(), val.storage_offset(), val.size(), val.stride())
