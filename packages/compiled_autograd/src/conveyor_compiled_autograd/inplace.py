"""Note [Gradients added in place at once]: in a training loop that keeps
its gradients (``zero_grad(set_to_none=False)``, gradient accumulation over
micro-batches), every parameter already has a ``.grad`` when the backward
runs, and eager's ``AccumulateGrad`` adds the new gradient to it in place
(``variable_grad += new_grad``: grad mode off, dense tensors that vmap
leaves alone) and stores nothing. Called from the capture one by one,
torch's functional ``AccumulateGrad`` does the same add, then stores the
same tensor as ``.grad`` again: a Python call, a boxed op and an attribute
store per parameter, about 2.5 us each, 70 us for a transformer's 28
parameters.

A run of such accumulations is one :class:`InPlaceAccumulations` call,
which does what eager does: one ``torch._foreach_add_`` of the new
gradients into the current ones, in graph order (on CPU, torch's foreach runs the
same ``add_`` per pair as ``+=``; other devices are left to the loop: their
fused foreach kernels are not checked against ``add_``), when all of these
hold:

* nothing but the kernels sees the calls (grad mode off, no dispatch mode,
  no functorch transform: ``below.unobserved``; torch-function modes are
  disabled around the call, as they are for eager's C++ add), so no one can
  tell one ``_foreach_add_`` from ``add_``\\ s, and ``+=`` is eager's branch;
* each variable's ``.grad`` now is the tensor the engine lifted as its
  current gradient (nothing replaced it since), a plain dense ``Tensor``
  with the variable's dtype, device and sizes, as is the new gradient, and
  the variable requires grad: eager's in-place branch, with no broadcast
  and no type promotion;
* no tensor appears twice among the variables, the current and the new
  gradients (each add reads only what it writes).

The type and layout conditions are kept behind one ``TensorGuards`` check
of all the tensors (as Note [Layouts checked at once]); identity and the
global state are checked on every call. Otherwise each accumulation goes
through torch's ``AccumulateGrad``, in order, as before. Only accumulations
without post-accumulate-grad hooks whose result nothing reads are gathered
(:func:`addable`).
"""

from __future__ import annotations

import inspect
import operator
from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.fx

from conveyor_compiled_autograd.below import unobserved
from conveyor_compiled_autograd.plan import Plan
from conveyor_compiled_autograd.recheck import tensor_check

_foreach_add_ = getattr(torch, "_foreach_add_", None)
_NO_TORCH_FUNCTION: Any = getattr(torch._C, "DisableTorchFunction", None)
_get_grad: Any = getattr(vars(torch._C.TensorBase).get("grad"), "__get__", None)


def addable(plan: Plan) -> set[torch.fx.Node]:
    """The accumulations that add to a current gradient the capture lifted,
    with no post-accumulate-grad hook and no reader of their result (see
    the Note); none where the installed torch's accumulation does not take
    the current gradient, or has no ``_foreach_add_``."""
    from torch._dynamo.external_utils import call_accumulate_grad

    params = tuple(inspect.signature(call_accumulate_grad).parameters)
    if params[:4] != ("variable", "variable_grad", "grad", "has_post_hooks") or None in (_foreach_add_, _get_grad, _NO_TORCH_FUNCTION):
        return set()
    out = set()
    for node in plan.opaque:
        if node.target is call_accumulate_grad and len(node.args) == 4 and not node.kwargs and not node.users:
            variable, current, grad, hooks = node.args
            if hooks is False and all(isinstance(a, torch.fx.Node) for a in (variable, current, grad)):
                out.add(node)
    return out


class InPlaceAccumulations:
    """A run of accumulations into current gradients, in graph order (see
    the Note): called with one list, ``[variable, current, new_grad] * n``.

    :param accumulate: each one's accumulation (torch's ``call_accumulate_grad``).
    """

    __name__ = "conveyor_accumulate_in_place"

    def __init__(self, accumulate: Sequence[Any]) -> None:
        self.accumulate = tuple(accumulate)
        #: the last call's types, their check, and whether all may add at once: replaced at once (threads)
        self._last: tuple[tuple[type, ...], Callable[..., bool] | None, bool] = ((), None, False)

    def __call__(self, values: list[Any]) -> None:
        variables = values[0::3]
        currents = values[1::3]
        grads = values[2::3]
        if unobserved() and self._layouts(values) and all(map(operator.is_, map(_get_grad, variables), currents)):
            with _NO_TORCH_FUNCTION():  # eager's add is C++'s: no torch-function mode sees it
                _foreach_add_(currents, grads)  # type: ignore[misc]
            return
        for i, (variable, current, grad) in enumerate(zip(variables, currents, grads, strict=True)):
            self.accumulate[i](variable, current, grad, False)

    def _layouts(self, values: list[Any]) -> bool:
        types = tuple(map(type, values))
        last_types, check, ok = self._last
        if check is not None and types == last_types and check(*values):
            return ok
        check = None
        ok = False
        if all(t in _PLAIN for t in types) and len(set(map(id, values))) == len(values):
            ok = all(map(_eager_adds_in_place, values[0::3], values[1::3], values[2::3]))
            check = tensor_check(values)
        self._last = (types, check, ok)
        return ok


def _eager_adds_in_place(variable: torch.Tensor, current: torch.Tensor, grad: torch.Tensor) -> bool:
    """Whether eager's ``AccumulateGrad`` would run ``current += grad`` with
    these layouts (the Note's conditions on types and layouts)."""
    if not variable.requires_grad or type(current) is not torch.Tensor or type(grad) is not torch.Tensor:
        return False
    if current.requires_grad or grad.requires_grad:
        return False
    if variable.device.type != "cpu":  # CUDA's fused foreach kernel is not add_'s: not checked yet
        return False
    want = (torch.strided, variable.dtype, variable.device, variable.shape)
    return all((t.layout, t.dtype, t.device, t.shape) == want for t in (current, grad))


_PLAIN = frozenset({torch.Tensor, torch.nn.Parameter})
