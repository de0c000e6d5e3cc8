"""Note [The last variant first]: a segment of a two-block transformer's
backward reads about 160 values (saved activations, parameters, sizes) on
every backward. Choosing its variant the general way (``_split``'s key of
every value, then ``Variant.holds``: the static signature and the stages'
keys of every value) cost about 0.3 ms per backward in Python, a seventh of
eager's whole backward. Training calls one segment with the same layouts
step after step, so a segment first asks whether the variant it ran last
holds, with one cheap check that implies everything the general way checks
for a *static* variant:

* the type of every value (so the same positions are tensors, ints and
  constants, and no tensor is a subclass);
* each tensor's dtype, device, sizes, strides and ``requires_grad`` (torch's
  own C++ ``TensorGuards`` where the installed torch has it: one call for all
  of them), and its storage offset; a tensor the call passed at several
  positions (one saved activation read by two formulas) is checked once, and
  must again be one tensor at those positions (``TensorGuards`` refuses a
  tensor passed twice);
* every int and constant, by value;
* the keyed stages' keys (dedupe's: which inputs are the same tensor) of the
  tensors' one ``CallSignature``, equal to those of the call the variant was
  last chosen for. The tensors' signature with the positions of the other
  values fixed (the types) determines the whole call's, so equal keys here
  mean equal keys there. The signature is read from the storages, which
  are new ones every step (activations); where this call's tensors fall in
  the recorded call's storage groups (each storage's identity read as the
  call signature reads it: Note [Storage identity] in
  ``conveyor.analysis.signature``), the signature is the recorded one (the same groups, the
  same tensors passed twice, and the layouts and offsets, which decide
  overlaps, checked above), so every key read from it is too: the keys are
  computed again only when the groups differ.

When any of it differs (new sizes, a new aliasing), the general way runs and
the check is rebuilt from the call it chose. Symbolic variants (guards over
symbols) always take the general way.

Which outputs are fresh (Note [Stealing a fresh gradient]) is kept with the
check too: a program run on inputs of the same layouts makes the same
outputs views of its inputs or of each other (a view op aliases whatever
the values, a computing op allocates), so the storage scan of every input
and output runs once per check, not once per backward.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Hashable, Sequence
from typing import Any

import torch
from conveyor.stage_api import CallSignature, storage_id

_PLAIN = frozenset({torch.Tensor, torch.nn.Parameter})
_offset = torch.Tensor.storage_offset


def getter(positions: Sequence[int]) -> Callable[[Sequence[Any]], tuple[Any, ...]]:
    """``values -> tuple(values[i] for i in positions)``, in C."""
    if len(positions) == 1:
        only = positions[0]
        return lambda values: (values[only],)
    if not positions:
        return lambda values: ()
    return operator.itemgetter(*positions)  # type: ignore[return-value]


def tensor_check(tensors: Sequence[torch.Tensor]) -> Callable[..., bool]:
    """A check that tensors have these tensors' dtypes, devices, sizes,
    strides and ``requires_grad``."""
    guards = getattr(getattr(torch._C, "_dynamo", None), "guards", None)
    tensor_guards = getattr(guards, "TensorGuards", None)
    if tensor_guards is not None:
        try:
            return tensor_guards(*tensors, dynamic_dims_sizes=None, dynamic_dims_strides=None).check  # type: ignore[no-any-return]
        except (TypeError, RuntimeError):  # another signature: the Python check below
            pass
    want = tuple((t.dtype, t.device, t.shape, t.stride(), t.requires_grad) for t in tensors)

    def check(*ts: torch.Tensor) -> bool:
        return tuple((t.dtype, t.device, t.shape, t.stride(), t.requires_grad) for t in ts) == want

    return check


class LastVariant:
    """The check of Note [The last variant first] for one call's values and
    the static variant chosen for them."""

    __slots__ = ("_all_tensors", "_apart", "_check", "_keyed", "_keys", "_offsets", "_others", "_repeats", "_tensors", "_types", "_groups", "_values", "below", "dynamic", "fresh", "variant")

    def __init__(self, values: Sequence[Any], positions: Sequence[int], variant: Any, keyed: Sequence[Any]) -> None:
        self.variant = variant
        #: which outputs are fresh, once asked (see the Note)
        self.fresh: list[bool] | None = None
        #: whether the variant runs below autograd (Note [Below autograd]); None until its first call
        self.below: bool | None = None
        self._types = tuple(map(type, values))
        tensor_at = [i for i, v in enumerate(values) if isinstance(v, torch.Tensor)]
        if not _PLAIN.issuperset(self._types[i] for i in tensor_at):
            raise TypeError("a tensor subclass")
        taken = set(tensor_at)
        first: dict[int, int] = {}
        for i in tensor_at:
            first.setdefault(id(values[i]), i)
        once = sorted(first.values())
        self._repeats = tuple((i, first[id(values[i])]) for i in tensor_at if first[id(values[i])] != i)
        self._all_tensors = getter(tensor_at)
        self._tensors = getter(once)
        self._others = getter([i for i in range(len(values)) if i not in taken])
        self._values = self._others(values)
        self.dynamic = getter(list(positions))  # the compiled variant's inputs
        tensors = self._tensors(values)
        self._check = tensor_check(tensors)
        self._offsets = tuple(map(_offset, tensors))
        self._keyed = tuple(keyed)
        signature = CallSignature.of(self._all_tensors(values)) if self._keyed else None
        #: the recorded call's storage groups (``CallSignature.groups``), where its tensors are plain
        self._groups = signature.groups if signature is not None and signature.plain else None
        self._apart = self._groups is not None and self._groups == tuple(range(len(self._groups)))
        self._keys = self._stage_keys(values, signature)

    def _stage_keys(self, values: Sequence[Any], signature: CallSignature | None = None) -> tuple[Hashable, ...]:
        if not self._keyed:
            return ()
        if signature is None:
            signature = CallSignature.of(self._all_tensors(values))
        return tuple(s.cache_key(signature) for s in self._keyed)

    def _keys_hold(self, values: Sequence[Any]) -> bool:
        """The keyed stages' keys are the recorded ones (see the Note: with
        the recorded storage groups, the signature is the recorded one)."""
        if not self._keyed:
            return True
        if self._groups is not None:
            tensors = self._all_tensors(values)
            if self._apart:  # the recorded storages were shared by none: so must these be
                if len(set(map(storage_id, tensors))) == len(tensors):
                    return True
            else:
                first: dict[int, int] = {}
                if tuple([first.setdefault(s, i) for i, s in enumerate(map(storage_id, tensors))]) == self._groups:
                    return True
        return self._stage_keys(values) == self._keys

    def holds(self, values: Sequence[Any]) -> bool:
        """Whether ``values`` are laid out as the call this was built from."""
        if tuple(map(type, values)) != self._types:
            return False
        for i, j in self._repeats:
            if values[i] is not values[j]:
                return False
        tensors = self._tensors(values)
        return (
            self._check(*tensors)
            and tuple(map(_offset, tensors)) == self._offsets
            and self._others(values) == self._values
            and self._keys_hold(values)
        )
