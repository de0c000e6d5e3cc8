"""Which inputs share a storage, described by value: the stage's cache key.

:func:`shared_storages` runs on every call (it is the stage's
``cache_key``, with the call's signature's storage groups) and at compile
time on the fake inputs (with the program record's), so the plan made at
compile time depends on nothing the key does not hold. Neither scans the
storages again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from conveyor.stage_api import CallSignature, Layout

from conveyor_synthetic_base.mapping import OuterIdx


@dataclass(frozen=True)
class TensorDesc:
    """What the plan needs to know about one tensor."""

    layout: Layout
    dtype: torch.dtype
    requires_grad: bool

    @staticmethod
    def of(t: torch.Tensor) -> TensorDesc:
        return TensorDesc(Layout.of(t), t.dtype, t.requires_grad)


@dataclass(frozen=True)
class SharedStorage:
    """Two or more tensor inputs in one storage.

    :ivar members: their outer positions, increasing.
    :ivar tensors: each member's description.
    :ivar roots: for each member, the index (into ``members``) of the first
        member that views the same tensor (its ``_base``, or itself when it
        is no view): members with equal entries are views of one tensor.
    :ivar root_tensors: each member's root's description.
    """

    members: tuple[OuterIdx, ...]
    tensors: tuple[TensorDesc, ...]
    roots: tuple[int, ...]
    root_tensors: tuple[TensorDesc, ...]

    def __post_init__(self) -> None:
        n = len(self.members)
        if n < 2 or list(self.members) != sorted(set(self.members)):
            raise ValueError(f"SharedStorage: needs two or more increasing members, got {self.members}")
        if not len(self.tensors) == len(self.roots) == len(self.root_tensors) == n:
            raise ValueError("SharedStorage: one description and one root per member")
        if any(not 0 <= r <= i for i, r in enumerate(self.roots)):
            raise ValueError(f"SharedStorage: roots {self.roots} must point at an earlier member")


def _root(t: torch.Tensor) -> torch.Tensor:
    return t._base if t._base is not None else t


def shared_storages(flat: Sequence[Any], groups: Sequence[int]) -> tuple[SharedStorage, ...]:
    """The storages that two or more strided tensor inputs share, grouped by
    ``groups`` (per input, the first input in its storage, ``-1`` for none:
    ``CallSignature.groups`` / ``InputAliasing.groups``)."""
    by_storage: dict[int, list[OuterIdx]] = {}
    for i, first in enumerate(groups):
        if first >= 0:
            by_storage.setdefault(first, []).append(OuterIdx(i))
    shared = []
    for members in by_storage.values():
        if len(members) < 2:
            continue
        roots = [_root(flat[m]) for m in members]
        first_view = [next(j for j in range(len(members)) if roots[j] is r) for r in roots]
        shared.append(
            SharedStorage(
                tuple(members),
                tuple(TensorDesc.of(flat[m]) for m in members),
                tuple(first_view),
                tuple(TensorDesc.of(r) for r in roots),
            )
        )
    return tuple(shared)


def cache_key(signature: CallSignature) -> Any:
    """The inputs that share storage: their layouts, dtypes, requires_grad,
    and which of them view one tensor (overlap follows from the layouts).
    ``()`` at once where the call's signature (Note [The call signature])
    says no two share one; otherwise grouped by its storage groups."""
    return () if signature.unshared else shared_storages(signature.inputs, signature.groups)
