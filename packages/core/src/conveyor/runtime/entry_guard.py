"""A guard per compiled entry: the per-call check that a call has the key of
an entry already compiled, without building the key.

Note [A guard per entry]: ``conveyor.compile`` keys its cache by a tuple that
describes every input (``conveyor.runtime.cache.call_key``: type, dtype, device,
sizes, strides, storage offset, ``requires_grad``, leafness, which inputs
share storage) and whatever the stages specialize on. Built per call that is
a Python loop over every lifted parameter. Instead, as dynamo does, each
entry keeps an :class:`EntryGuard` made from the call that reached it, and a
later call asks the guards of its coarse key (the argument structure, the
non-tensor values, grad mode, autocast) whether one holds:

- ``torch._C._dynamo.guards.TensorGuards`` checks, in C++, each tensor's
  Python type, dispatch keys (so device type, layout, conjugate and negative
  bits), dtype, device index, ``requires_grad``, sizes and strides;
- what it does not check is checked here, each with one ``map`` over the
  inputs and no Python loop: storage offsets; leafness, of the inputs that
  require grad (a tensor that does not is always a leaf); which inputs share
  a storage (all distinct, or the same groups); and each stage's
  ``cache_key``, all read from the call's one signature (Note [The call
  signature]), which the caller made before asking any guard.

A guard holds exactly when ``call_key`` and the stage keys would equal the
entry's, so a guard that fails sends the call to the full key, never to a
wrong entry. Guards are made only for calls whose inputs are all plain
strided tensors (``torch.Tensor``, ``nn.Parameter``, ``nn.Buffer``); the rest
(subclasses, sparse layouts, fakes) always take the full key. What is not
about the inputs (a module's tree and training flags, its forward hooks) is
the caller's: ``conveyor.compiled`` drops every guard when it changes.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

from torch._C._dynamo.guards import TensorGuards as _TensorGuards

from conveyor.analysis.signature import CallSignature

#: torch's stubs for the C++ class lag its signature (``tensor_check_names``)
TensorGuards: Any = _TensorGuards


@dataclass(frozen=True)
class EntryGuard:
    """What a call must match to reuse one compiled entry.

    :ivar tensors: the C++ check of the inputs, in the order
        ``(*front, *back)`` given to :meth:`check` (the call's own tensors
        first, so a new input size fails at the first tensor).
    :ivar offsets: each flat input's storage offset.
    :ivar grad_positions: flat positions of the inputs that require grad.
    :ivar leaves: their leafness.
    :ivar groups: the storage groups (``CallSignature.groups``), ``None``
        when no two inputs share a storage.
    :ivar stages: the stages' ``cache_key`` functions.
    :ivar stage_keys: their values for the call that made the guard.
    :ivar entry: the compiled entry (``conveyor.runtime.specialize.Entry``).
    """

    tensors: Any
    offsets: tuple[Any, ...]
    grad_positions: tuple[int, ...]
    leaves: tuple[bool, ...]
    groups: tuple[int, ...] | None
    stages: tuple[Callable[[CallSignature], Hashable], ...]
    stage_keys: tuple[Hashable, ...]
    entry: Any

    def __post_init__(self) -> None:
        if len(self.leaves) != len(self.grad_positions):
            raise ValueError("EntryGuard: one leafness per input that requires grad")
        if len(self.stage_keys) != len(self.stages):
            raise ValueError("EntryGuard: one key per keyed stage")

    @staticmethod
    def of(
        front: Sequence[Any],
        back: Sequence[Any],
        signature: CallSignature,
        stages: Sequence[Callable[[CallSignature], Hashable]],
        entry: Any,
        stage_keys: tuple[Hashable, ...] | None = None,
    ) -> EntryGuard | None:
        """The guard of ``entry`` for this call (``None`` when its inputs are
        not all plain strided tensors). ``signature`` describes the tensors
        of ``back`` then ``front`` (the graph's input order); ``stage_keys``,
        the stages' keys of this call where the caller has them."""
        if not signature.plain:
            return None
        flat = signature.inputs
        ordered = [*front, *back]
        guards = TensorGuards(
            *ordered,
            dynamic_dims_sizes=[list(t.shape) for t in ordered],
            dynamic_dims_strides=[list(t.stride()) for t in ordered],
            tensor_check_names=[f"flat[{i}]" for i in range(len(ordered))],
        )
        grad_positions = tuple(i for i, t in enumerate(flat) if t.requires_grad)
        if stage_keys is None:
            stage_keys = tuple([s(signature) for s in stages])
        return EntryGuard(
            tensors=guards,
            offsets=signature.offsets,
            grad_positions=grad_positions,
            leaves=signature.leaves(grad_positions),
            groups=None if signature.unshared else signature.groups,
            stages=tuple(stages),
            stage_keys=stage_keys,
            entry=entry,
        )

    def check(self, front: Sequence[Any], back: Sequence[Any], signature: CallSignature) -> bool:
        """Whether this call (``signature`` of ``[*back, *front]``) has the
        key of the call that made the guard."""
        if not self.tensors.check(*front, *back):
            return False
        if signature.offsets != self.offsets:
            return False
        if self.grad_positions and signature.leaves(self.grad_positions) != self.leaves:
            return False
        if self.groups is None:
            if not signature.unshared:
                return False
        elif signature.groups != self.groups:
            return False
        if self.stages and tuple([s(signature) for s in self.stages]) != self.stage_keys:
            return False
        return True
