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
registered globally, runs at trace time; its tensor work is compiled in, but
anything else it does (count calls, log, set state, talk to other ranks)
would happen once. Such a module runs eagerly, with a warning that names the
hook. The hooks in force are part of the compile-cache key, so a hook
registered after a compile is seen at the next call. Tensor-parallel styles (``torch.distributed.tensor.parallel``) register
hooks that only re-lay out their inputs and outputs; those are compiled in.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterator, Sequence
from typing import Any

import torch
from torch.nn.modules import module as _module
from torch.utils.hooks import RemovableHandle

from conveyor.errors import CaptureError
from conveyor.fallback import EagerFallback

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


def refuse_forward_hooks(module: torch.nn.Module | None) -> None:
    """Raise :class:`EagerFallback` naming a forward hook that capture would
    run only once (Note [Forward hooks])."""
    if module is None:
        return
    for where, hook in _forward_hooks(module):
        if _pure(hook):
            continue
        target = getattr(hook, "func", hook)  # functools.partial
        name = getattr(target, "__qualname__", type(target).__qualname__)
        raise EagerFallback(
            f"{where} has the forward hook {name}, whose Python side effects a captured graph would run only "
            "once (Note [Forward hooks])"
        )


def hooks_key(modules: Sequence[torch.nn.Module]) -> Hashable:
    """The forward hooks in force, for the compile-cache key: a hook
    registered after a compile is seen at the next call. Recomputed only
    when a hook was registered anywhere since (``RemovableHandle.next_id``)
    or the modules changed; a removal seen late only keeps an eager
    fallback a little longer."""
    stamp = RemovableHandle.next_id
    if _last[0] is modules and _last[1] == stamp:
        return _last[2]
    key = (
        tuple(_module._global_forward_pre_hooks),
        tuple(_module._global_forward_hooks),
        tuple((tuple(m._forward_pre_hooks), tuple(m._forward_hooks)) for m in modules),
    )
    _last[:] = [modules, stamp, key]
    return key


_last: list[Any] = [None, None, None]  # modules, RemovableHandle.next_id, key


def _pure(hook: Any) -> bool:
    """A tensor-parallel layout hook: a style's method, or the hook
    ``distribute_module`` registers around one."""
    target = getattr(hook, "func", hook)  # functools.partial
    target = getattr(target, "__func__", target)  # a bound method
    where = getattr(target, "__module__", None) or ""
    if where.startswith(_PURE_HOOK_MODULES):
        return True
    if where == _DISTRIBUTE_MODULE:
        cells = [c.cell_contents for c in getattr(target, "__closure__", None) or ()]
        wrapped = [c for c in cells if callable(c) and not isinstance(c, type)]
        return bool(wrapped) and all(_pure(c) for c in wrapped)
    return False


def _forward_hooks(module: torch.nn.Module) -> Iterator[tuple[str, Any]]:
    for hook in (*_module._global_forward_pre_hooks.values(), *_module._global_forward_hooks.values()):
        yield "the process (a global module hook)", hook
    for path, m in module.named_modules():
        for hook in (*m._forward_pre_hooks.values(), *m._forward_hooks.values()):
            yield f"module {path or type(module).__qualname__!r}", hook
