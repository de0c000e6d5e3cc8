"""Input aliasing groups from the values a graph is called with.

A pipeline stage knows its inputs as fake tensors, which keep the storage
sharing of the real ones (two inputs are views of one tensor exactly when their
fake values share a storage). ``input_aliasing`` turns that into the groups
``AliasDb.from_graph`` takes: inputs that share a storage may alias, others never.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.fx
from torch.multiprocessing.reductions import StorageWeakRef


def input_aliasing(graph: torch.fx.Graph, values: Sequence[Any]) -> list[list[torch.fx.Node]]:
    """Group the placeholders of ``graph`` by the storage of ``values`` (one value
    per placeholder, in order; fake or real tensors). Non-tensor inputs are in no group."""
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(values):
        raise ValueError(f"the graph has {len(placeholders)} inputs but {len(values)} values were given")
    groups: dict[StorageWeakRef, list[torch.fx.Node]] = {}
    for node, value in zip(placeholders, values, strict=True):
        if isinstance(value, torch.Tensor):
            groups.setdefault(StorageWeakRef(value.untyped_storage()), []).append(node)
    return list(groups.values())
