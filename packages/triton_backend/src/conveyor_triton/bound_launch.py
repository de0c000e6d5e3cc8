"""Bound launches: a static kernel's launches after its first on CUDA call
the compiled kernel's launcher directly, not Triton's ``JITFunction``.

Note [Bound launches]: a launch through Triton's ``JITFunction`` binds and
specializes its arguments and looks the compiled kernel up on every call
(tens of microseconds, more than a small kernel runs on a GPU). A static
kernel's arguments are its tensors only and its launch is fixed, so after
its first launch on CUDA the step calls the compiled kernel's launcher
directly, as Inductor's generated code does: grid, stream and block sizes
bound once. What Triton specialized the first launch on must still hold, or
the call goes through the ``JITFunction`` again: every pointer 16-byte
aligned as it was (Triton compiles another kernel for an unaligned one), the
same current device, and no launch hooks (a profiler's). Fusion groups'
kernels (``KernelStep``) and scatters' static kernels (``ScatterStep``, one
binding per kernel: the clearing kernel of a ``scatter_reduce`` without self
and a kernel generated for a layout met at run time each have their own) are
bound; generic kernels, whose sizes are arguments and whose grid follows
them, are not.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from conveyor_triton.launch import Launch


def binds_launches(device: torch.device) -> bool:
    """Whether a first launch on ``device`` is bound for the next ones: on
    CUDA (the interpreter's launches return no compiled kernel)."""
    return device.type == "cuda"


def bind(compiled: Any, launch: Launch, args: Sequence[torch.Tensor]) -> Any:
    """A callable launching ``compiled`` on ``args`` as its first launch did,
    returning False without launching when that would not be the same launch
    (Note [Bound launches]); None when the first launch cannot be bound."""
    needed = ("run", "function", "packed_metadata")
    if compiled is None or not all(hasattr(compiled, a) for a in needed) or any(t.data_ptr() % 16 for t in args):
        return None
    from triton import knobs

    device = args[0].device.index
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)  # what Triton's own launch asks, where torch has it
    stream = raw if raw is not None else (lambda index: torch.cuda.current_stream(index).cuda_stream)
    run, function, packed = compiled.run, compiled.function, compiled.packed_metadata
    grid, blocks = launch.grid, tuple(v for k, v in launch.meta.items() if k in ("XBLOCK", "RBLOCK"))
    hooks = knobs.runtime

    def launch_bound(tensors: Sequence[torch.Tensor]) -> bool:
        if not (_unhooked(hooks.launch_enter_hook) and _unhooked(hooks.launch_exit_hook)):
            return False
        if torch.cuda.current_device() != device or any(t.data_ptr() % 16 for t in tensors):
            return False
        run(grid, 1, 1, stream(device), function, packed, None, None, None, *tensors, *blocks)
        return True

    return launch_bound


def _unhooked(hook: Any) -> bool:
    """Whether a Triton launch hook is unset: None, or a ``HookChain`` holding no calls."""
    return hook is None or (isinstance(getattr(hook, "calls", None), list) and not hook.calls)
