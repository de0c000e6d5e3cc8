"""A capture that ends in another grad mode, autocast state, default dtype or
other global setting than it began: put back, and refused; results made in
another inference mode than the caller's: refused."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
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
# ``torch.ones`` float64, later calls neither), in another deterministic-algorithms
# setting or float32 matmul precision (which later calls left as they were, where
# eager leaves them changed for the caller), or with another default device
# (``torch.set_default_device``: the first call left it changed, later calls not).
@dataclass(frozen=True)
class _Switch:
    """One thread- or process-global setting a program may change without a context."""

    what: str
    get: Callable[[], Any]
    put: Callable[[Any], None]
    how: str


def _autocast(device: str) -> _Switch:
    def put(state: tuple[bool, torch.dtype]) -> None:
        torch.set_autocast_enabled(device, state[0])
        torch.set_autocast_dtype(device, state[1])

    return _Switch(
        f"autocast on {device}",
        lambda: (torch.is_autocast_enabled(device), torch.get_autocast_dtype(device)),
        put,
        "torch.set_autocast_enabled or set_autocast_dtype called, not entered",
    )


_SWITCHES = (
    _Switch(
        "grad mode", torch.is_grad_enabled, torch._C._set_grad_enabled, "torch.set_grad_enabled called, not entered"
    ),
    _Switch("the default dtype", torch.get_default_dtype, torch.set_default_dtype, "torch.set_default_dtype called"),
    _Switch(
        "deterministic algorithms",
        lambda: (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()),
        lambda s: torch.use_deterministic_algorithms(s[0], warn_only=s[1]),
        "torch.use_deterministic_algorithms called",
    ),
    _Switch(
        "float32 matmul precision",
        torch.get_float32_matmul_precision,
        torch.set_float32_matmul_precision,
        "torch.set_float32_matmul_precision called",
    ),
    _Switch(
        "the default device",
        lambda: getattr(getattr(torch._GLOBAL_DEVICE_CONTEXT, "device_context", None), "device", None),
        torch.set_default_device,
        "torch.set_default_device called",
    ),
    *(_autocast(d) for d in _AUTOCAST_DEVICES),
)


@contextlib.contextmanager
def modes_kept() -> Iterator[None]:
    before = [sw.get() for sw in _SWITCHES]
    try:
        yield
    finally:
        after = [sw.get() for sw in _SWITCHES]
        for sw, b, a in zip(_SWITCHES, before, after, strict=True):
            if a != b:
                sw.put(b)
    for sw, b, a in zip(_SWITCHES, before, after, strict=True):
        if a != b:
            raise EagerFallback(
                f"it leaves {sw.what} changed ({b} -> {a}; {sw.how}), which a graph cannot replay "
                "(Note [A program that leaves grad mode changed])"
            )


# Note [Outputs made in another inference mode]: a program that makes a result
# inside ``torch.inference_mode()`` returns an inference tensor in eager (one
# that autograd refuses to save, and that cannot be written outside inference
# mode); made inside ``torch.inference_mode(False)`` under a caller in inference
# mode, a normal tensor. A graph keeps no such region: its results are made
# under the caller's mode, so they came back normal (or inference) tensors where
# eager's were not (aot_eager does the same). The trace's fake results know what
# eager's are, so a program with a result of its own (one that shares no memory
# with an input) in another inference mode than the caller's runs eagerly, with
# a warning.
def refuse_inference_outputs(outs: Sequence[Any], inputs: Sequence[Any], caller: bool) -> None:
    """Raise :class:`EagerFallback` if an output of the trace that shares no memory
    with an input is an inference tensor where the caller's mode (``caller``) makes
    none, or the other way round."""
    other = [i for i, o in enumerate(outs) if _strided(o) and o.is_inference() != caller]
    if not other:
        return
    storages = {_storage(t) for t in inputs if _strided(t)}
    for i in other:
        o = outs[i]
        if _storage(o) not in storages:
            raise EagerFallback(
                f"its result {i} is {'' if o.is_inference() else 'not '}an inference tensor, made in another "
                "inference mode than the caller's, which a graph cannot replay "
                "(Note [Outputs made in another inference mode])"
            )


def _storage(t: torch.Tensor) -> int | None:
    """``t``'s storage (None: a tensor without one, a wrapper subclass)."""
    try:
        return int(t.untyped_storage()._cdata)
    except (RuntimeError, NotImplementedError):
        return None


def _strided(t: Any) -> bool:
    return isinstance(t, torch.Tensor) and t.layout is torch.strided
