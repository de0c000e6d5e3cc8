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
``use_count`` check: a constant or a cached buffer is never stolen). The
reference count that means "only the run time" depends on the interpreter
(how a call passes its arguments), so it is probed once, through the same
generated code (``straight.own_references``); where the probe gives no one
count, nothing is stolen. Everything else goes through torch's
``AccumulateGrad``, unchanged.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import Any

import torch
from torch._prims_common import is_non_overlapping_and_dense_or_false as is_non_overlapping_and_dense

from conveyor_compiled_autograd.recheck import tensor_check


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


def _contract(variable: Any, new_grad: Any) -> bool:
    """Whether eager would store ``new_grad`` as ``variable.grad`` as it is,
    by their types and layouts alone (see the Note)."""
    if type(new_grad) is not torch.Tensor or new_grad.requires_grad:
        return False
    if (new_grad.dtype, new_grad.device, new_grad.shape) != (variable.dtype, variable.device, variable.shape):
        return False
    if variable.layout is not torch.strided:
        return False
    # the layout contract: the parameter's strides if it is non-overlapping and dense, else contiguous
    if new_grad.stride() == variable.stride():
        return bool(variable.is_contiguous() or new_grad.is_contiguous() or is_non_overlapping_and_dense(variable))
    return bool(new_grad.is_contiguous() and not is_non_overlapping_and_dense(variable))


class Accumulations:
    """A run of accumulations that may steal, in graph order (Note [Stealing
    a fresh gradient]): called with one list, ``[variable, new_grad,
    fresh] * n``, each without a current gradient in the capture (one
    argument: what the interpreter's call adds to the gradients' reference
    counts does not depend on how many there are).

    :param accumulate: each one's accumulation (torch's ``call_accumulate_grad``).
    :param post_hooks: each one's ``has_post_hooks`` argument.

    Note [Layouts checked at once]: whether a gradient may be stored as it
    is depends on the two tensors' types and layouts (:func:`_contract`),
    which a training loop repeats step after step. The decisions of the
    last call are kept with one C++ check of every variable's and
    gradient's dtype, device, sizes, strides and ``requires_grad``
    (``recheck``'s ``TensorGuards``) and their types; what a step decides
    anew is only what eager decides on every call: that nothing but the
    run time holds the gradient (its reference count, against ``own``),
    that the variable still has no ``.grad``, and
    that grad mode is off.
    """

    __name__ = "conveyor_accumulate"

    def __init__(self, accumulate: Sequence[Any], post_hooks: Sequence[Any], own: int) -> None:
        self.accumulate = tuple(accumulate)
        self.post_hooks = tuple(post_hooks)
        #: what the references of a gradient only the generated caller holds count (``-1``: a probe of it)
        self.own = own
        #: the last layouts' types, their check and decisions: one attribute, replaced at once (threads)
        self._last: tuple[tuple[type, ...], Callable[..., bool] | None, tuple[bool, ...]] = ((), None, ())

    def __call__(self, values: list[Any]) -> Any:
        grads = values[1::3]
        refs = list(map(_getrefcount, grads))  # before anything else takes a reference
        own = self.own
        if own < 0:  # the probe (``straight.own_references``)
            return refs
        variables = values[0::3]
        ok = self._layouts(variables, grads)
        steal = own > 0 and not torch.is_grad_enabled()
        for i, (variable, new_grad, fresh) in enumerate(zip(variables, grads, values[2::3], strict=True)):
            if steal and ok[i] and fresh and refs[i] == own and variable.grad is None:
                variable.grad = new_grad
            else:
                self.accumulate[i](variable, None, new_grad, self.post_hooks[i])
        return None

    def _layouts(self, variables: Sequence[Any], grads: Sequence[Any]) -> tuple[bool, ...]:
        types = tuple(map(type, (*variables, *grads)))
        last_types, check, ok = self._last
        if check is not None and types == last_types and check(*variables, *grads):
            return ok
        ok = tuple(map(_contract, variables, grads))
        check = None
        if all(t in _PLAIN for t in types) and len(set(map(id, (*variables, *grads)))) == len(types):
            check = tensor_check([*variables, *grads])  # a tensor passed twice: decided every call
        self._last = (types, check, ok)
        return ok


_getrefcount = sys.getrefcount
_PLAIN = frozenset({torch.Tensor, torch.nn.Parameter})
