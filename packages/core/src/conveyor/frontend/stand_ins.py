"""The tensors a trace runs on in place of a request's fake inputs (Note
[Tracing on stand-ins]), made cheaply (Note [Stand-ins made below the fake
mode])."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor, unset_fake_temporarily

from conveyor.analysis.symbolic import symbolic_layout


def stand_ins_of(fake_inputs: Sequence[Any], fake_mode: Any) -> list[Any]:
    """Note [Tracing on stand-ins]: ``make_fx`` runs the program on the
    tensors it is given, so an in-place op (``mul_``, ``t_``, ``set_``...)
    would change a request's fake inputs: their metadata, and their autograd
    state (a version bump, a ``grad_fn``, a no-grad view "modified in place
    with grad enabled" that then raises on ``is_leaf``). A request's inputs
    describe what the caller passes, so each trace runs on stand-ins: the
    same storage, metadata and ``requires_grad``, and the same leafness, so
    that an in-place op on a leaf (or a view of one) that requires grad
    fails as in eager and one on a non-leaf does not."""
    stand_ins: list[Any] = []
    leaves: dict[int, torch.Tensor] = {}  # id(fake base) -> its stand-in leaf

    def leaf(t: torch.Tensor) -> torch.Tensor:
        if id(t) not in leaves:
            leaves[id(t)] = _same_storage(t, fake_mode).requires_grad_(t.requires_grad)
        return leaves[id(t)]

    def stand_in(t: torch.Tensor) -> torch.Tensor:
        if not t.requires_grad or t.is_leaf:
            return leaf(t)
        with torch.enable_grad():
            if t._base is not None and t._base.is_leaf and t._base.requires_grad:
                # a view of a leaf: in-place ops raise as in eager
                return leaf(t._base).as_strided(t.size(), t.stride(), t.storage_offset())
            # a non-leaf: same storage, not a view, no history to follow
            return torch._C._functions.DelayedError("conveyor: a traced input has no history", 1)(leaf(t))

    made: dict[int, Any] = {}  # the same object in several positions stays one object
    for t in fake_inputs:
        if not isinstance(t, torch.Tensor) or t.layout is not torch.strided:
            stand_ins.append(t)
            continue
        if id(t) not in made:
            made[id(t)] = stand_in(t)
        stand_ins.append(made[id(t)])
    return stand_ins


def _same_storage(t: torch.Tensor, fake_mode: Any) -> torch.Tensor:
    """A new tensor (not ``detach()``: that would share the version counter)
    on ``t``'s storage with ``t``'s metadata, no history, no grad.

    Note [Stand-ins made below the fake mode]: a fake tensor is a meta
    tensor that carries its device; ``set_`` dispatched through the fake
    mode costs about a millisecond (no cached kernel serves it), once per
    input of every trace (a CNN's hundreds of parameters and buffers, three
    traces per training compile). For a fake of this mode with static sizes,
    the new meta tensor is made below the fake mode and wrapped as a fake of
    the same device: the same tensor for a tenth of that. Symbolic layouts,
    and anything but this mode's fakes, go through the fake mode. The
    wrapping is ``FakeTensor``'s constructor, as the fake mode's own
    ``fast_detach`` wraps its result: the converter's
    ``from_meta_and_device`` would also memoize the fresh meta tensor (a
    weak-dictionary entry and its finalizer, half the cost of a stand-in)
    for a conversion nothing asks of a meta tensor no one else holds."""
    if type(t) is FakeTensor and t.fake_mode is fake_mode and not symbolic_layout(t):
        with unset_fake_temporarily(), torch.no_grad():
            meta = torch.empty(0, dtype=t.dtype, device="meta")
            meta.set_(t.untyped_storage(), t.storage_offset(), t.size(), t.stride())
        return FakeTensor(fake_mode, meta, t.device)
    with torch.no_grad():
        fresh = torch.empty(0, dtype=t.dtype, device=t.device)
        fresh.set_(t.untyped_storage(), t.storage_offset(), t.size(), t.stride())
    return fresh
