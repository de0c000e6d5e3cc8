"""Writes under ``no_grad`` keep the written tensor's autograd identity.

Note [No-grad writes keep autograd identity]: in eager, after
``with torch.no_grad(): w.add_(1)`` the tensor ``w`` holds new values but is
the same autograd node as before (a leaf stays a leaf), so a later ``w * x``
sends gradient to ``w``'s history as if the write were the identity. In a
functional graph the new value is a new node computed under ``no_grad`` (and
detached, see ``conveyor.grad_regions``), so later reads would pass no
gradient at all.

So, when tracing the functional graph, each no-grad write into a tensor that
requires grad is followed by adding ``z``: a tensor of ``-0.0`` computed,
with grad, from the tensor *before* the write, whose gradient with respect
to it is the identity (where it is finite). ``v + (-0.0)`` is ``v``
bit for bit, so values are unchanged; gradients now flow as in eager. A
write through a view keeps the identity of the view's base. The
addition is dispatched below autograd with grad mode still on, so it is
neither a write autograd checks (leaves) nor a node the no-grad detach pass
cuts.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx
from conveyor.grad_regions import GRAD_META


def zero_with_identity_grad(t: torch.Tensor) -> torch.Tensor:
    """``-0.0`` everywhere; d/dt is the identity where ``t`` is finite."""
    detached = t.detach()
    return torch.where(torch.isfinite(detached), detached - t, 0.0).neg()


def _written(n: torch.fx.Node, args: tuple[Any, ...], kwargs: dict[str, Any]) -> list[torch.Tensor]:
    """The tensors a node writes that require grad; for a write through a
    view, the view's base (the whole tensor keeps its identity)."""
    schema = getattr(n.target, "_schema", None)
    if schema is None:
        return []
    values: list[torch.Tensor] = []
    for j, arg in enumerate(schema.arguments):
        if arg.alias_info is not None and arg.alias_info.is_write:
            value = args[j] if j < len(args) else kwargs.get(arg.name)
            if isinstance(value, torch.Tensor):
                base = value._base if value._base is not None else value
                if base.requires_grad and not any(base is v for v in values):
                    values.append(base)
    return values


class IdentityKeepingInterpreter(torch.fx.Interpreter):
    """Runs each node under its captured grad mode, and keeps the autograd
    identity of tensors written under ``no_grad`` (Note [No-grad writes keep
    autograd identity]). Use it under ``FunctionalTensorMode``."""

    def run_node(self, n: torch.fx.Node) -> Any:
        if n.meta.get(GRAD_META, True):
            return super().run_node(n)
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        written = _written(n, args, kwargs) if torch.is_grad_enabled() else []
        zeros = [zero_with_identity_grad(t) for t in written]
        with torch.no_grad():
            out = super().run_node(n)
        with torch._C._AutoDispatchBelowAutograd():
            for t, z in zip(written, zeros, strict=True):
                t.add_(z)
        return out
