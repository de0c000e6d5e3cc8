"""Measuring what a program saves for backward (tests and benchmarks).

Every tensor autograd packs for backward during a call passes through
``torch.autograd.graph.saved_tensors_hooks``: eager ops' saved inputs and
outputs, an ``autograd.Function``'s ``save_for_backward`` (ours, and
AOTAutograd's under ``torch.compile``). Tensors are counted once per storage,
since a view saved next to its base keeps no extra memory alive.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class SavedForBackward:
    """What one call saved.

    :ivar tensors: tensors packed (with repeats).
    :ivar bytes: bytes of the distinct storages they keep alive.
    :ivar bytes_besides: the same, not counting storages of ``exclude``
        (the inputs and parameters, which the caller keeps alive anyway).
    """

    tensors: int
    bytes: int
    bytes_besides: int

    def __post_init__(self) -> None:
        if not 0 <= self.bytes_besides <= self.bytes:
            raise ValueError(f"SavedForBackward: bytes_besides {self.bytes_besides} not in [0, {self.bytes}]")


def saved_for_backward(fn: Callable[[], Any], exclude: Iterable[torch.Tensor] = ()) -> tuple[Any, SavedForBackward]:
    """Call ``fn()`` and measure what it saved for backward; returns its result too."""
    storages: dict[int, int] = {}
    count = 0

    def pack(t: torch.Tensor) -> torch.Tensor:
        nonlocal count
        count += 1
        storage = t.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        result = fn()
    kept = {t.untyped_storage().data_ptr() for t in exclude}
    total = sum(storages.values())
    besides = sum(n for ptr, n in storages.items() if ptr not in kept)
    return result, SavedForBackward(count, total, besides)
