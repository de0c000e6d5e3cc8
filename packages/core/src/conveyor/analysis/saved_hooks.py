"""The caller's saved-tensor hooks, hidden while conveyor traces.

Note [Saved-tensor hooks while tracing]: ``torch.autograd.graph.
saved_tensors_hooks(pack, unpack)`` (activation offloading, checkpointing
policies, a user's own counters) applies to every tensor autograd saves while
it is installed, and the caller may install it around a call that compiles.
Every trace conveyor makes with grad enabled (the capture, the record's
functional run, the functional trace, the joint trace) runs autograd on fake
tensors, so ``pack`` would be handed ``FakeTensor``s, which it may store,
count or offload: a fake escaping into the user's objects. So every trace
runs with the caller's hooks hidden. torch's tracing switch
(``torch._C._autograd._saved_tensors_hooks_set_tracing``, what AOTAutograd
and dynamo use) hides every hook, and autograd saves each tensor as it does
with no hook; where a probe shows the switch missing or not hiding hooks,
identity hooks are pushed instead: they hide the caller's too, but autograd
then detaches each saved tensor it hands to them (a detach per saved tensor
in a joint graph). The compiled program's own saves at run time see the
caller's hooks, as eager's do.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterator
from typing import Any

import torch


def _same(t: Any) -> Any:
    return t


@functools.cache
def _set_tracing() -> Callable[[bool], bool] | None:
    """torch's switch that hides saved-tensor hooks while it traces, where a
    probe shows it does: a hook pushed before the switch is not called for
    a tensor saved after it. ``None`` otherwise."""
    switch = getattr(torch._C._autograd, "_saved_tensors_hooks_set_tracing", None)
    if switch is None:
        return None
    called: list[bool] = []

    def pack(t: Any) -> Any:
        called.append(True)
        return t

    x = torch.ones(1, requires_grad=True)
    with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, _same):
        prior = switch(True)
        try:
            x.sin()
        finally:
            switch(prior)
        x.sin()  # the hook is back after the switch
    return switch if called == [True] else None


@contextlib.contextmanager
def caller_saved_hooks_hidden() -> Iterator[None]:
    """Run a trace with the caller's saved-tensor hooks hidden (Note
    [Saved-tensor hooks while tracing])."""
    switch = _set_tracing()
    if switch is None:
        with torch.autograd.graph.saved_tensors_hooks(_same, _same):
            yield
        return
    prior = switch(True)
    try:
        yield
    finally:
        switch(prior)
