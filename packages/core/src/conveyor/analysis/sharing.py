"""Which of a call's tensor inputs share memory: one scan per call.

``storage_groups`` numbers each input by the first input sharing its
storage; ``unshared`` says no two share. The program record, the call key,
the entry guards and the stages' keys all ask; inside ``keying(flat)`` (one
call's key) the scan runs once for that list.
"""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

import torch


def storage_groups(flat: Sequence[Any]) -> tuple[int, ...]:
    """For each flat input, the position of the first tensor input sharing its
    storage (itself if none; -1 for non-tensors and tensors with no strided
    storage). Inside ``keying(flat)`` (one call's key), computed once for
    that list (stage keys ask too)."""
    return _groups(flat)[0]


def unshared(flat: Sequence[Any]) -> bool:
    """Whether every tensor input is strided and no two share a storage (so
    no tensor is passed twice): what the stage keys that look at aliasing
    ask first, answered from the same scan as :func:`storage_groups`."""
    return _groups(flat)[1]


class keying:
    """``with keying(flat):`` around the computation of one call's whole key
    (core and stage parts): ``storage_groups(flat)`` is computed once for
    that list object, not once per part that asks. The list must not change
    inside the block; nothing is remembered after it (no input is kept
    alive). Nested or concurrent blocks on other lists compute afresh.
    ``groups`` primes the block with the answer a caller already has (an
    entry guard: Note [A guard per entry])."""

    __slots__ = ("flat", "groups", "saved")

    def __init__(self, flat: Sequence[Any], groups: tuple[tuple[int, ...], bool] | None = None) -> None:
        self.flat = flat
        self.groups = groups

    def __enter__(self) -> None:
        self.saved = (_keying[0], _keying[1])
        _keying[0], _keying[1] = self.flat, self.groups

    def __exit__(self, *exc: object) -> None:
        _keying[0], _keying[1] = self.saved


#: the flat list of the key being computed, and its storage groups once known
_keying: list[Any] = [None, None]


def _groups(flat: Sequence[Any]) -> tuple[tuple[int, ...], bool]:
    if _keying[0] is flat:
        groups = _keying[1]
        if groups is None:
            groups = _keying[1] = _storage_groups(flat)
        return groups  # type: ignore[no-any-return]
    return _storage_groups(flat)


def _storage_groups(flat: Sequence[Any]) -> tuple[tuple[int, ...], bool]:
    """``storage_groups`` and ``unshared`` in one scan."""
    if _PLAIN.issuperset(map(type, flat)):
        # plain tensors only (the common case): storages read without a Python loop
        try:
            storages = list(map(_cdata, map(_untyped_storage, flat)))
        except NotImplementedError:  # a sparse or mkldnn layout has no storage: the general path
            pass
        else:
            if len(set(storages)) == len(storages):
                return identity(len(storages)), True
            first: dict[int, int] = {}
            return tuple([first.setdefault(s, i) for i, s in enumerate(storages)]), False
    first = {}
    groups = [
        (first.setdefault(t.untyped_storage()._cdata, i) if t.layout is _STRIDED else _NO_STORAGE)
        if isinstance(t, torch.Tensor)
        else -1
        for i, t in enumerate(flat)
    ]
    no_storage = groups.count(_NO_STORAGE)
    if no_storage:
        groups = [-1 if g == _NO_STORAGE else g for g in groups]
    return tuple(groups), not no_storage and len(first) == len(groups) - groups.count(-1)


_NO_STORAGE = -2  # a tensor with no strided storage (sparse): -1 in the groups
_untyped_storage = torch.Tensor.untyped_storage
_cdata = operator.attrgetter("_cdata")
_identities: dict[int, tuple[int, ...]] = {}


def identity(n: int) -> tuple[int, ...]:
    """``(0, 1, ..., n - 1)``: the storage groups of inputs that share nothing."""
    groups = _identities.get(n)
    if groups is None:
        groups = _identities[n] = tuple(range(n))
    return groups


_PLAIN = frozenset({torch.Tensor, torch.nn.Parameter, torch.nn.Buffer})
_STRIDED = torch.strided
