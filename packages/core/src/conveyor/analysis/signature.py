"""One description of a call's inputs' memory, made once per call.

Note [The call signature]: which of a call's inputs share a storage decides
the program conveyor compiles for it (two inputs in one storage are one
memory to the program), so several parts of a call ask: the core's key
(``conveyor.runtime.cache.call_key``), the entry guards (Note [A guard per
entry]), the stages' keys (``StageSpec.cache_key``: ``dedupe``,
``synthetic_base``), automatic dynamic shapes, and, on a compile's fake
inputs, the program record's aliasing (``Program.aliasing``). Each entry
point makes one :class:`CallSignature` of its flat inputs per call and hands
that object to every one of them: the storage scan runs once, and nothing
keeps it in a module global between the parts that ask. The finer facts
(storage offsets, leafness, which inputs are the same tensor object, which
inputs in one storage share a byte) are computed the first time a part asks
and kept on the object, which the call drops when it returns (no input is
kept alive).

Note [Storage identity]: a storage is told apart from another by
``untyped_storage()._cdata``, the address of its C++ object. Reading it
builds a Python storage object per tensor; ``torch._C._storage_id`` reads
the same number in C. :data:`storage_id` is that function where a probe at
import shows it equal to ``untyped_storage()._cdata`` (on a tensor, a view of
it and another tensor), else the Python read, with a warning that names the
cause. It is the one place that knows how a storage is identified: the
signature's scan and the compiled_autograd stage's recheck both read it.
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Callable, Sequence
from typing import Any

import torch

from conveyor.analysis.overlap import Layout, overlaps


class CallSignature:
    """Which of one call's flat inputs share memory (Note [The call signature]).

    Make it with :meth:`of`; treat it as frozen.

    :ivar inputs: the flat inputs it describes (tensors and non-tensors).
    :ivar groups: for each input, the position of the first tensor input
        sharing its storage (itself if none; ``-1`` for non-tensors and
        tensors with no strided storage).
    :ivar unshared: every tensor input is strided and no two share a
        storage (so no tensor is passed twice): what a key that looks at
        aliasing asks first.
    :ivar plain: every input is a plain strided tensor (``torch.Tensor``,
        ``nn.Parameter``, ``nn.Buffer``): what the entry guards can check.
    """

    __slots__ = ("_offsets", "_overlapping", "_same", "groups", "inputs", "plain", "unshared")

    def __init__(self, inputs: Sequence[Any], groups: tuple[int, ...], unshared: bool, plain: bool) -> None:
        self.inputs = inputs
        self.groups = groups
        self.unshared = unshared
        self.plain = plain
        self._offsets: tuple[Any, ...] | None = None
        self._same: tuple[int, ...] | None = None
        self._overlapping: frozenset[tuple[int, int]] | None = None

    @staticmethod
    def of(inputs: Sequence[Any]) -> CallSignature:
        """The signature of ``inputs`` (real or fake tensors and non-tensors):
        one scan of their storages."""
        if _PLAIN.issuperset(map(type, inputs)):
            # plain tensors only (the common case): storages read without a Python loop
            try:
                storages = list(map(storage_id, inputs))
            except NotImplementedError:  # a sparse or mkldnn layout has no storage: the general path
                pass
            else:
                if len(set(storages)) == len(storages):
                    return CallSignature(inputs, identity(len(storages)), True, True)
                first: dict[int, int] = {}
                return CallSignature(inputs, tuple([first.setdefault(s, i) for i, s in enumerate(storages)]), False, True)
        first = {}
        groups = [
            (first.setdefault(storage_id(t), i) if t.layout is _STRIDED else _NO_STORAGE)
            if isinstance(t, torch.Tensor)
            else -1
            for i, t in enumerate(inputs)
        ]
        no_storage = groups.count(_NO_STORAGE)
        if no_storage:
            groups = [-1 if g == _NO_STORAGE else g for g in groups]
        unshared = not no_storage and len(first) == len(groups) - groups.count(-1)
        return CallSignature(inputs, tuple(groups), unshared, False)

    @property
    def shares_storage(self) -> bool:
        """Some two tensor inputs share a storage."""
        return not self.unshared and any(g >= 0 and g != i for i, g in enumerate(self.groups))

    @property
    def offsets(self) -> tuple[Any, ...]:
        """Each input's storage offset (``None`` for non-tensors and tensors
        with no strided storage; a ``SymInt`` for a symbolic fake)."""
        if self._offsets is None:
            if self.plain:
                self._offsets = tuple(map(_offset, self.inputs))
            else:
                self._offsets = tuple(
                    t.storage_offset() if isinstance(t, torch.Tensor) and t.layout is _STRIDED else None
                    for t in self.inputs
                )
        return self._offsets

    def leaves(self, positions: Sequence[int]) -> tuple[bool, ...]:
        """The leafness of the tensor inputs at ``positions`` (read now: a
        tensor that does not require grad is always a leaf, so callers ask
        for the inputs that do)."""
        return tuple(map(_is_leaf, map(self.inputs.__getitem__, positions))) if positions else ()

    @property
    def same(self) -> tuple[int, ...]:
        """For each input, the first position holding the same tensor object
        (its own position for a non-tensor and for a tensor passed once)."""
        if self._same is None:
            if self.unshared:  # no storage shared: no tensor passed twice
                self._same = identity(len(self.inputs))
            else:
                first: dict[int, int] = {}
                self._same = tuple(
                    first.setdefault(id(v), i) if isinstance(v, torch.Tensor) else i for i, v in enumerate(self.inputs)
                )
        return self._same

    @property
    def overlapping(self) -> frozenset[tuple[int, int]]:
        """The pairs ``(j, i)``, ``j < i``, of inputs in one storage that have
        a byte in common (exact for static layouts; a pair with a symbolic
        layout is taken to overlap)."""
        if self._overlapping is None:
            pairs: frozenset[tuple[int, int]] = frozenset()
            if not self.unshared:
                members: dict[int, list[int]] = {}
                for i, g in enumerate(self.groups):
                    if g >= 0:
                        members.setdefault(g, []).append(i)
                inputs = self.inputs
                pairs = frozenset(
                    (j, i)
                    for group in members.values()
                    for n, i in enumerate(group)
                    for j in group[:n]
                    if _may_overlap(inputs[j], inputs[i])
                )
            self._overlapping = pairs
        return self._overlapping

    def __repr__(self) -> str:
        return f"CallSignature(groups={self.groups}, unshared={self.unshared})"


def _may_overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    try:
        return overlaps(Layout.of(a), Layout.of(b))
    except (TypeError, ValueError, RuntimeError):  # a symbolic size, stride or offset
        return True


_identities: dict[int, tuple[int, ...]] = {}


def identity(n: int) -> tuple[int, ...]:
    """``(0, 1, ..., n - 1)``: the storage groups of inputs that share nothing."""
    groups = _identities.get(n)
    if groups is None:
        groups = _identities[n] = tuple(range(n))
    return groups


def _python_storage_id(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


def _probe_storage_id() -> Callable[[torch.Tensor], int]:
    """``torch._C._storage_id`` where it is ``untyped_storage()._cdata``
    (Note [Storage identity]); else the Python read, with a warning."""
    read = getattr(torch._C, "_storage_id", None)
    if not callable(read):
        cause = "torch._C._storage_id is missing"
    else:
        a, b = torch.empty(4), torch.empty(4)
        try:
            same = all(read(t) == _python_storage_id(t) for t in (a, a[1:], b)) and read(a) != read(b)
            cause = "torch._C._storage_id differs from untyped_storage()._cdata"
        except (TypeError, RuntimeError) as e:
            same, cause = False, f"torch._C._storage_id failed: {e!r}"
        if same:
            return read  # type: ignore[no-any-return]
    warnings.warn(f"conveyor: storages are identified in Python ({cause}); calls check their inputs more slowly", stacklevel=1)
    return _python_storage_id


#: a tensor's storage's identity, ``untyped_storage()._cdata`` (Note [Storage identity])
storage_id: Callable[[torch.Tensor], int] = _probe_storage_id()

_NO_STORAGE = -2  # a tensor with no strided storage (sparse): -1 in the groups
_offset: Any = torch.Tensor.storage_offset
_is_leaf = operator.attrgetter("is_leaf")
_PLAIN = frozenset({torch.Tensor, torch.nn.Parameter, torch.nn.Buffer})
_STRIDED = torch.strided
