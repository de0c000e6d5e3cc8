"""Tracing on fake inputs without changing them.

Note [Fake inputs keep their metadata]: ``make_fx`` runs the program on the
fake inputs it is given, so an in-place metadata op in the program (``t_``,
``as_strided_``, ``transpose_``...) changes the fake inputs' sizes and strides.
The request's inputs must describe the tensors the caller passes, so this
stage restores them from the graph's placeholders, which ``make_fx`` stamps
with a snapshot of each input as it was before the program ran, both when it
receives a request and after each of its own traces.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx

import conveyor


def _metadata(t: torch.Tensor) -> tuple[Any, ...]:
    return (tuple(t.size()), tuple(t.stride()), t.storage_offset())


def restore(inputs: Sequence[Any], metadata: Sequence[tuple[Any, ...] | None], fake_mode: Any) -> None:
    """Give each fake tensor input back the (size, stride, offset) it had."""
    with fake_mode, torch.no_grad():
        for t, meta in zip(inputs, metadata):
            if meta is not None and isinstance(t, torch.Tensor) and _metadata(t) != meta:
                t.as_strided_(*meta)


def placeholder_metadata(graph: torch.fx.GraphModule) -> list[tuple[Any, ...] | None]:
    """The (size, stride, offset) of each input before the program ran."""
    out: list[tuple[Any, ...] | None] = []
    for node in graph.graph.nodes:
        if node.op == "placeholder":
            val = node.meta.get("val")
            out.append(_metadata(val) if isinstance(val, torch.Tensor) else None)
    return out


def trace(fn: Callable[..., Any], inputs: Sequence[Any], fake_mode: Any) -> torch.fx.GraphModule:
    """``conveyor.retrace`` that leaves the inputs' metadata as it found it."""
    before = [_metadata(t) if isinstance(t, torch.Tensor) else None for t in inputs]
    try:
        return conveyor.retrace(fn, inputs, fake_mode)
    finally:
        restore(inputs, before, fake_mode)
