"""The compile-cache key: everything about a call that changes the program.

Per tensor input: type, dtype, device, layout, sizes, strides, storage offset,
requires_grad, leafness. Per call: grad mode, and which inputs share storage
(a storage-group number per tensor input). Stages add what they specialize on
through ``StageSpec.cache_key``. Non-tensor arguments are keyed by value by
the caller (see ``conveyor.compiled``). A changed key is a recompile, never a
reused artifact.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor


def tensor_key(t: torch.Tensor, shapes: bool = True) -> Hashable:
    kind = torch.Tensor if isinstance(t, FakeTensor) else type(t)  # a fake stands for a real tensor
    if shapes:
        return (
            kind,
            t.dtype,
            t.device,
            t.layout,
            tuple(t.shape),
            t.stride() if t.layout is torch.strided else None,
            t.storage_offset() if t.layout is torch.strided else None,
            t.requires_grad,
            t.is_leaf,
        )
    return (kind, t.dtype, t.device, t.requires_grad, t.is_leaf)


def storage_groups(flat: Sequence[Any]) -> tuple[int, ...]:
    """For each flat input, the position of the first tensor input sharing its
    storage (itself if none; -1 for non-tensors)."""
    first: dict[int, int] = {}
    groups: list[int] = []
    for i, t in enumerate(flat):
        if isinstance(t, torch.Tensor) and t.layout is torch.strided:
            groups.append(first.setdefault(t.untyped_storage()._cdata, i))
        else:
            groups.append(-1)
    return tuple(groups)


def call_key(flat: Sequence[Any], shapes: bool = True) -> Hashable:
    """The core part of the key for one call's flat graph inputs."""
    return (
        torch.is_grad_enabled(),
        _autocast_key(),
        tuple(tensor_key(t, shapes) if isinstance(t, torch.Tensor) else _scalar_kind(t) for t in flat),
        storage_groups(flat),
    )


def _autocast_key() -> tuple[Any, ...]:
    """Autocast changes which dtypes the traced ops compute in."""
    return tuple(
        (torch.get_autocast_dtype(device) if torch.is_autocast_enabled(device) else None)
        for device in ("cpu", "cuda")
    )


def _scalar_kind(v: Any) -> Any:
    """A non-tensor graph input (dynamo passes sizes as ints, SymInts while tracing)."""
    if isinstance(v, (int, torch.SymInt)):
        return "int"
    if isinstance(v, (float, torch.SymFloat)):
        return "float"
    return type(v)
