"""A capture that ends in another grad mode, autocast state or default dtype
than it began: put back, and refused."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch

from conveyor.errors import EagerFallback

#: the device types whose autocast state a program may leave changed
_AUTOCAST_DEVICES = ("cpu", "cuda")


# Note [A program that leaves grad mode changed]: ``torch.set_grad_enabled(False)``
# called (not entered) in a program changes the caller's grad mode for what
# follows the call, and outputs computed before it keep their history. A
# graph has no way to say so: its grad-mode switches are regions inside it
# (Note [Gradient cuts below autograd]). The trace ran the switch for real,
# so it would have left the capturing thread's mode changed once (the first
# call's outputs came back without history, later calls changed nothing), and
# behind dynamo the compiled graph left the mode as it found it (h_sweep5 B7).
# So a trace that ends in another grad mode than it began puts the mode back
# and the program runs eagerly, with a warning; behind dynamo, the graph
# runs as dynamo made it, which sets the mode.
#
# The same holds for autocast: ``torch.set_autocast_enabled("cpu", True)`` (or
# its dtype) called in a program casts what follows it, there and in the
# caller. The trace would have left it on, so the first call cast ops before
# the switch too (a float32 matmul came back bfloat16), and later calls left
# it off where eager leaves it on. A trace that ends in another autocast state
# (enabled, dtype, per device type) is put back and refused alike, and so is
# one that ends in another default dtype (``torch.set_default_dtype``, whose
# later factory calls make float64 in eager: the first call made both
# ``torch.ones`` float64, later calls neither).
def _state() -> tuple[Any, ...]:
    autocast = tuple((torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in _AUTOCAST_DEVICES)
    return (torch.is_grad_enabled(), torch.get_default_dtype(), *autocast)


def _restore(state: tuple[Any, ...]) -> None:
    torch._C._set_grad_enabled(state[0])
    torch.set_default_dtype(state[1])
    for d, (enabled, dtype) in zip(_AUTOCAST_DEVICES, state[2:], strict=True):
        torch.set_autocast_enabled(d, enabled)
        torch.set_autocast_dtype(d, dtype)


@contextlib.contextmanager
def modes_kept() -> Iterator[None]:
    before = _state()
    try:
        yield
    finally:
        after = _state()
        if after != before:
            _restore(before)
    if after[0] != before[0]:
        raise EagerFallback(
            f"it leaves grad mode {'on' if after[0] else 'off'} (torch.set_grad_enabled called, not entered), "
            "which a graph cannot replay (Note [A program that leaves grad mode changed])"
        )
    if after[1] != before[1]:
        raise EagerFallback(
            f"it leaves the default dtype {after[1]} (torch.set_default_dtype called), "
            "which a graph cannot replay (Note [A program that leaves grad mode changed])"
        )
    if after != before:
        changed = [d for d, a, b in zip(_AUTOCAST_DEVICES, after[2:], before[2:], strict=True) if a != b]
        raise EagerFallback(
            f"it leaves autocast changed on {', '.join(changed)} (torch.set_autocast_enabled or "
            "set_autocast_dtype called, not entered), which a graph cannot replay "
            "(Note [A program that leaves grad mode changed])"
        )
