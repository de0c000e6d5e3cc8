"""Writes under ``no_grad`` keep the written tensor's autograd identity.

Note [No-grad writes keep autograd identity]: in eager, after
``with torch.no_grad(): w.add_(1)`` the tensor ``w`` holds new values but is
the same autograd node as before (a leaf stays a leaf), so a later ``w * x``
sends gradient to ``w``'s history as if the write were the identity. In a
functional graph the new value is a new node computed under ``no_grad`` (and
detached, see ``conveyor.analysis.grad_regions``), so later reads would pass no
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

Note [A no-grad set_ keeps its own identity]: ``a.set_(b)`` under
``no_grad`` makes ``a`` and ``b`` share storage while ``a`` keeps its
autograd node. Adding ``z`` into ``a`` would add it into ``b``'s storage
too, so that reads of ``b`` sent gradient to ``a``'s history as well. Each
later read of ``a`` (not a view taken of it: a write may go through that)
is instead ``a + (z + cancel_grad(a))``: ``a``'s value, with gradient to
``a``'s history and none to the storage it now shares.

The same holds for a write through a ``detach``-ed alias in grad mode
(``a.detach().mul_(2)``): autograd does not record it, so ``a`` keeps its
identity in eager, and the functional graph adds ``z`` to ``a`` likewise.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.fx
from conveyor.stage_api import GRAD_META, is_view, recorded_with_grad, swaps_storage, written_positions


def zero_with_identity_grad(t: torch.Tensor) -> torch.Tensor:
    """``-0.0`` everywhere; d/dt is the identity where ``t`` is finite."""
    detached = t.detach()
    return torch.where(torch.isfinite(detached), detached - t, 0.0).neg()


def cancel_grad(t: torch.Tensor) -> torch.Tensor:
    """``-0.0`` everywhere; d/dt is minus the identity where ``t`` is finite."""
    detached = t.detach()
    return torch.where(torch.isfinite(detached), t - detached, 0.0).neg()


def _base(t: torch.Tensor) -> torch.Tensor:
    return t._base if t._base is not None else t


def _written(
    n: torch.fx.Node,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    detached_from: dict[torch.fx.Node, torch.Tensor],
    only_detached: bool,
) -> list[torch.Tensor]:
    """The tensors a node writes that require grad; for a write through a
    view, the view's base (the whole tensor keeps its identity); for a write
    through a ``detach``-ed alias, the base of what it was detached from.
    With ``only_detached``, only the latter (autograd records the others)."""
    values: list[torch.Tensor] = []
    for j, name in written_positions(n):
        value = args[j] if j < len(args) else kwargs.get(name)
        node = n.args[j] if j < len(n.args) else n.kwargs.get(name)
        if isinstance(node, torch.fx.Node) and node in detached_from:
            value = detached_from[node]
        elif only_detached:
            continue
        if isinstance(value, torch.Tensor):
            base = _base(value)
            if base.requires_grad and not any(base is v for v in values):
                values.append(base)
    return values


class IdentityKeepingInterpreter(torch.fx.Interpreter):
    """Runs each node under its captured grad mode, and keeps the autograd
    identity of tensors written under ``no_grad`` or through a ``detach``-ed
    alias (Note [No-grad writes keep autograd identity]: eager's
    ``a.detach().mul_(2)`` changes ``a``'s values, not its autograd node).
    Use it under ``FunctionalTensorMode``."""

    def __init__(self, module: torch.fx.GraphModule) -> None:
        super().__init__(module)
        # detach-ed aliases (and views of them) -> the tensor requiring grad they alias
        self.detached_from: dict[torch.fx.Node, torch.Tensor] = {}
        # tensors ``set_`` onto another storage under no_grad -> their identity zero
        self.swapped: dict[torch.Tensor, torch.Tensor] = {}
        #: whether it kept an identity (wrote of its own: Note [One functional run])
        self.kept_identity = False

    def _read_swapped(self, n: torch.fx.Node, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, Any]:
        """Each read of a swapped tensor (not a view of it, which a write
        may go through) sends gradient to its identity, not to the storage."""
        if is_view(n):
            return args, kwargs

        def read(v: Any) -> Any:
            for t, z in self.swapped.items():
                if v is t and getattr(t, "elem", t).shape == z.shape:
                    return t + (z + cancel_grad(t))
            return v

        return tuple(read(a) for a in args), {k: read(v) for k, v in kwargs.items()}

    def run_node(self, n: torch.fx.Node) -> Any:
        args, kwargs = self.fetch_args_kwargs_from_env(n)
        grad_mode = n.meta.get(GRAD_META, True)
        enabled = torch.is_grad_enabled()
        written = _written(n, args, kwargs, self.detached_from, grad_mode) if enabled else []
        zeros = [zero_with_identity_grad(t) for t in written]
        self.kept_identity = self.kept_identity or bool(written)
        if self.swapped and not any(t is v for t in self.swapped for v in written):
            args, kwargs = self._read_swapped(n, args, kwargs)
        if enabled and not grad_mode:
            with torch.no_grad():
                out = getattr(self, n.op)(n.target, args, kwargs)  # what Interpreter.run_node does, on these args
        elif enabled:
            # a node captured with grad records its replay with grad too, also where its own
            # autograd runs it inside a Function's no_grad forward (a custom op's, Note [Custom ops])
            with recorded_with_grad():
                out = getattr(self, n.op)(n.target, args, kwargs)
        else:  # the node's mode is the current one
            out = getattr(self, n.op)(n.target, args, kwargs)
        if not written:  # nothing of its own to add
            self._track_detach(n, args, out)
            return out
        keep = [(t, z) for t, z in zip(written, zeros, strict=True) if getattr(t, "elem", t).shape == z.shape]
        if swaps_storage(n):
            # Note [A no-grad set_ keeps its own identity]
            for t, z in keep:
                self.swapped[t] = z
            keep = []
        # a write through a view leaves the elements it did not write with the
        # gradient path they had (the scatter into the base): cancel it, so the
        # tensor's gradient is the identity once, through ``z`` only
        # (a set_ onto another shape keeps no identity to carry)
        shifts = [z + cancel_grad(t) for t, z in keep]
        with torch._C._AutoDispatchBelowAutograd():
            for (t, _), shift in zip(keep, shifts, strict=True):
                t.add_(shift)
        self._track_detach(n, args, out)
        return out

    def _track_detach(self, n: torch.fx.Node, args: tuple[Any, ...], out: Any) -> None:
        if n.op != "call_function" or not isinstance(out, torch.Tensor) or not args:
            return
        src = n.args[0] if isinstance(n.args[0], torch.fx.Node) else None
        if src is not None and src in self.detached_from and is_view(n):
            self.detached_from[n] = self.detached_from[src]
        elif n.target is torch.ops.aten.detach.default and isinstance(args[0], torch.Tensor) and args[0].requires_grad:
            self.detached_from[n] = args[0]
