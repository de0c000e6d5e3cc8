"""Custom autograd Functions captured as one node.

Note [Custom autograd functions]: a ``torch.autograd.Function`` carries its
own backward. Capture traces below autograd, where the Function's forward is
just aten ops: inlined, the graph would lose the custom backward (a
straight-through estimator, a gradient reversal) and with it eager's
gradients. So capture records each application of a Function to tensors
that require grad as one node, ``conveyor::apply_function``, a custom op:

- its kernel (and its fake kernel) runs the Function's forward, as
  ``apply`` under ``no_grad`` does: the values;
- its autograd formula runs the Function's own backward: it applies the
  Function again to the saved inputs with grad enabled and differentiates
  that application (the forward is recomputed, as under activation
  checkpointing), so ``ctx`` is the Function's own.

Every stage before the autograd stage keeps the node as it is (it is a
functional op); the autograd stage's joint trace records the forward as the
node and the backward as the Function's backward, traced; backends call the
node's kernel. Before recording, the Function is run once on stand-ins: one
that writes its inputs, returns one of them (or a view of one), returns
something other than tensors, or marks a differentiable output
non-differentiable keeps the warned eager fallback, as does one its forward
cannot run on fake tensors. A program with such a node is not stored in the
disk cache: the node names its Function by an in-process index.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing

#: the op's qualified name, as graphs show it
OP_NAME = "conveyor::apply_function"


@dataclass(frozen=True)
class Applied:
    """One application site of a Function: the class, the arguments with the
    tensors left out (``None`` at ``tensor_positions``), and whether it
    returned one tensor or a tuple."""

    cls: type
    args: tuple[Any, ...]
    tensor_positions: tuple[int, ...]
    single: bool

    def call(self, tensors: Sequence[torch.Tensor], apply: Callable[..., Any]) -> list[torch.Tensor]:
        args = list(self.args)
        for pos, t in zip(self.tensor_positions, tensors, strict=True):
            args[pos] = t
        out = apply(self.cls, *args)
        return [out] if self.single else list(out)


_APPLIED: dict[int, Applied] = {}
_keys = itertools.count()


def _original_apply(cls: type, *args: Any) -> Any:
    from conveyor.fallback import original_apply  # the unwrapped Function.apply

    return original_apply(cls, *args)


@functools.cache
def _op() -> Any:
    """The custom op, defined on first use."""

    def forward(key: int, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        with torch.no_grad():
            return _APPLIED[key].call(tensors, _original_apply)

    # the same forward computes the values and, on fake tensors, their metadata
    apply_function = torch.library.custom_op(OP_NAME, forward, mutates_args=())
    apply_function.register_fake(forward)

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        key, tensors = inputs
        ctx.key = key
        ctx.requires = tuple(t.requires_grad for t in tensors)
        ctx.save_for_backward(*tensors)

    def backward(ctx: Any, grads: list[torch.Tensor | None]) -> tuple[None, list[torch.Tensor | None]]:
        saved = ctx.saved_tensors
        with torch.enable_grad():
            leaves = [t.detach().requires_grad_(rg) for t, rg in zip(saved, ctx.requires, strict=True)]
            outs = _APPLIED[ctx.key].call(leaves, _original_apply)
            pairs = [(o, g) for o, g in zip(outs, grads, strict=True) if g is not None and o.requires_grad]
            wrt = [t for t in leaves if t.requires_grad]
            found = torch.autograd.grad([o for o, _ in pairs], wrt, [g for _, g in pairs], allow_unused=True) if pairs else ()
        it = iter(found)
        return None, [next(it, None) if rg else None for rg in ctx.requires]

    apply_function.register_autograd(backward, setup_context=setup_context)
    return torch.ops.conveyor.apply_function.default


def is_apply_function(target: Any) -> bool:
    """Whether an FX node's target is the op of captured Functions."""
    return isinstance(target, torch._ops.OpOverload) and target.name() == OP_NAME


def probe(cls: type, args: tuple[Any, ...]) -> Applied | str:
    """The application of ``cls`` to ``args`` as one node, or why it cannot
    be one (Note [Custom autograd functions]): the Function is run once on
    stand-ins of the tensor arguments, outside the trace."""
    positions = tuple(i for i, a in enumerate(args) if isinstance(a, torch.Tensor))
    if not positions:
        return "its tensors are not direct arguments of apply"
    if any(isinstance(leaf, torch.Tensor) for i, a in enumerate(args) if i not in positions for leaf in pytree.tree_leaves(a)):
        return "it takes tensors inside containers"
    # outside the trace and the capture's own function modes (it watches the user's code)
    with disable_proxy_modes_tracing(), torch._C.DisableTorchFunction():
        stand_ins = [_stand_in(a) if isinstance(a, torch.Tensor) else a for a in args]
        ins = [stand_ins[i] for i in positions]
        versions = [t._version for t in ins]
        try:
            with torch.enable_grad():
                out = _original_apply(cls, *stand_ins)
        except Exception as exc:  # its own failure on fake tensors, named in the warning
            return f"its forward cannot run on fake tensors ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
        outs = [out] if isinstance(out, torch.Tensor) else list(out) if isinstance(out, (tuple, list)) else None
        if outs is None or not outs or not all(isinstance(o, torch.Tensor) for o in outs):
            return "it returns something other than tensors"
        if [t._version for t in ins] != versions:
            return "it writes to its inputs"
        storages = {t.untyped_storage()._cdata for t in ins if t.layout is torch.strided}
        if any(o.layout is torch.strided and o.untyped_storage()._cdata in storages for o in outs):
            return "it returns one of its inputs or a view of one"
        if any((o.is_floating_point() or o.is_complex()) and not o.requires_grad for o in outs):
            return "it marks an output non-differentiable"
    template = tuple(None if i in positions else a for i, a in enumerate(args))
    return Applied(cls, template, positions, isinstance(out, torch.Tensor))


def apply_as_node(applied: Applied, args: tuple[Any, ...]) -> Any:
    """Apply a probed Function to ``args`` as one ``conveyor::apply_function`` node."""
    key = next(_keys)
    _APPLIED[key] = applied
    # the op's own autograd is a custom op's (Note [Custom ops] in conveyor.fallback)
    outs = _op()(key, [args[i] for i in applied.tensor_positions])
    return outs[0] if applied.single else tuple(outs)


def _stand_in(t: torch.Tensor) -> torch.Tensor:
    """A copy of ``t`` with its ``requires_grad``, not a leaf when it requires
    grad (an in-place op on it is then what the Function itself does)."""
    copy = t.detach().clone()
    return copy.requires_grad_().clone() if t.requires_grad else copy
