"""Note [Stealing a fresh gradient]: eager's ``AccumulateGrad`` stores a new
gradient as ``.grad`` without copying it ("steals" it) when nothing else
refers to it and it obeys the gradient layout contract; otherwise it copies.
torch's functional ``AccumulateGrad``, called from Python, always sees extra
references (the call's own arguments) and so always copies: one extra
kernel and a gradient's worth of bytes per parameter.

The run time steals where it can prove what eager proves: the gradient is
an output of a compiled segment that nothing else in the capture reads, it
shares storage with none of the segment's inputs nor with its other outputs
(so no user tensor, saved tensor or other gradient aliases it; a view of
its own fresh buffer is fine), the parameter has no ``.grad`` yet, and it has the
parameter's dtype, device, sizes and the strides the layout contract asks
for, and nothing but the run time holds a reference to it (eager's
``use_count`` check: a constant or a cached buffer is never stolen).
Everything else goes through torch's ``AccumulateGrad``, unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from torch._prims_common import is_non_overlapping_and_dense_or_false as is_non_overlapping_and_dense


def fresh_outputs(inputs: Sequence[Any], outputs: Sequence[Any]) -> list[bool]:
    """For each output: a tensor in storage no input and no other output uses."""
    used: dict[int, int] = {}
    for t in (*inputs, *outputs):
        if isinstance(t, torch.Tensor) and t.layout is torch.strided:
            ptr = t.untyped_storage().data_ptr()
            used[ptr] = used.get(ptr, 0) + 1
    fresh = []
    for t in outputs:
        ok = isinstance(t, torch.Tensor) and t.layout is torch.strided
        fresh.append(ok and used.get(t.untyped_storage().data_ptr(), 0) == 1)
    return fresh


def try_steal(variable: Any, variable_grad: Any, new_grad: Any) -> bool:
    """Store ``new_grad`` as ``variable.grad`` if eager would (see the Note);
    the caller has checked that nothing else refers to it."""
    if variable_grad is not None or variable.grad is not None or torch.is_grad_enabled():
        return False
    if type(new_grad) is not torch.Tensor or new_grad.requires_grad:
        return False
    if (new_grad.dtype, new_grad.device, new_grad.shape) != (variable.dtype, variable.device, variable.shape):
        return False
    if variable.layout is not torch.strided:
        return False
    # the layout contract: the parameter's strides if it is non-overlapping and dense, else contiguous
    if new_grad.stride() == variable.stride():
        ok = variable.is_contiguous() or new_grad.is_contiguous() or is_non_overlapping_and_dense(variable)
    else:
        ok = new_grad.is_contiguous() and not is_non_overlapping_and_dense(variable)
    if not ok:
        return False
    variable.grad = new_grad
    return True
