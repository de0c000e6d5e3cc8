"""Modules whose forward does what a captured graph cannot replay.

Note [Distributed wrappers]: ``conveyor.compile`` captures a module's forward
once, at trace time, and replays only its tensor operations. A
``DistributedDataParallel`` forward also prepares its reducer for the next
backward (which gradients to all-reduce, when); FSDP's forward gathers and
frees parameter shards and registers backward hooks. Captured, that Python
work would run once: from the second step each rank would train on its own
gradients and the replicas drift apart without a word. So compiling such a
wrapper is refused at once, with an error that says what to compile instead:
``torch.compile(model, backend="conveyor")`` (dynamo keeps the wrapper's
Python in eager and compiles the module inside; for DDP its DDPOptimizer
splits the graph at bucket boundaries), or the wrapped module's ``forward``
(``ddp.module.forward = conveyor.compile(ddp.module.forward)``: DDP's own
forward and hooks then run eagerly around the compiled computation).

Note [Forward hooks]: a module forward (pre-)hook, on any submodule or
registered globally, is the program's code like ``forward``: it runs at trace
time and its tensor work is compiled in. The state a hook reaches (its closure,
the globals it names, the object of a bound method) is watched as the
program's own (Note [State a program reaches] in ``conveyor.frontend.reachable``): a
hook that counts calls, stores activations or sets state runs eagerly, with
a warning that names what it wrote. Python work that leaves no state behind
(a ``print``) runs once, at trace time, as it would in ``forward``. The hooks
in force are part of the compile-cache key, so a hook registered after a
compile is seen at the next call.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from conveyor.errors import CaptureError

#: hooks from these modules only transform tensors and are compiled in
_PURE_HOOK_MODULES = ("torch.distributed.tensor.parallel.",)
_DISTRIBUTE_MODULE = "torch.distributed.tensor._api"


def _wrapper_kinds() -> tuple[tuple[type, str], ...]:
    kinds: list[tuple[type, str]] = [(torch.nn.parallel.DistributedDataParallel, "DistributedDataParallel")]
    if torch.distributed.is_available():
        from torch.distributed.fsdp import FSDPModule, FullyShardedDataParallel

        kinds += [(FullyShardedDataParallel, "FullyShardedDataParallel"), (FSDPModule, "fully_shard (FSDP2)")]
    return tuple(kinds)


def _wrapper_kind(module: torch.nn.Module) -> str | None:
    """The distributed wrapper ``module`` is or holds, if any."""
    kinds = _wrapper_kinds()
    for m in module.modules():
        for cls, kind in kinds:
            if isinstance(m, cls):
                return kind
    return None


def refuse_distributed_wrapper(fn: Callable[..., Any]) -> None:
    """Raise :class:`CaptureError` when ``fn`` is (or holds) a DDP or FSDP
    module, saying what to compile instead (Note [Distributed wrappers])."""
    if not isinstance(fn, torch.nn.Module):
        return
    kind = _wrapper_kind(fn)
    if kind is None:
        return
    inner = (
        "or compile the wrapped module's forward: ddp.module.forward = conveyor.compile(ddp.module.forward)"
        if kind == "DistributedDataParallel"
        else "(FSDP's per-step parameter gathering and freeing runs in its hooks around each block)"
    )
    raise CaptureError(
        f"conveyor.compile: {kind} does Python work on every forward (gradient synchronisation setup, "
        "parameter gathering) that a captured graph would run only once, so replicas would drift apart; "
        f"compile it with torch.compile(model, backend='conveyor') instead, {inner} "
        "(Note [Distributed wrappers])"
    )
