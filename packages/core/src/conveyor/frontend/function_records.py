"""A Function applied in the program: its forward and backward at run time.

Note [A Function's backward at run time]: eager runs a custom
``torch.autograd.Function``'s ``backward`` once per backward pass, in
Python, with the ``ctx`` its forward filled in that same call. Traced into
the joint graph (on fake tensors, at compile time) it would run once, when
the program compiles: a counter it bumps, a list it appends the gradient to,
a global flag it reads, a Python branch on a gradient's value all happen
then, or are wrong. So the backward stays opaque. An ``Applied`` (Note
[Custom autograd functions] in ``conveyor.frontend.functions``) is
recorded as ``conveyor::apply_function_recorded(key, tensors, ints)``, a
custom op whose outputs are the Function's outputs and one more, a *token*:

- its kernel applies the Function once, under ``enable_grad``, to detached
  leaves that require grad where the application's tensors did
  (``ctx.needs_input_grad`` is eager's), and keeps that application (its
  outputs' autograd graph: the real ``ctx`` with what the forward saved and
  set on it) on the token, a CPU int64 scalar, as a Python attribute.
  Forward side effects happen once per call, as in eager;
- its autograd formula saves the token, the tensors and the outputs (so the
  partition keeps them alive and unshared: Note [Keeping a record's tensors]
  in ``conveyor_autograd.min_cut``) and records
  ``conveyor::function_backward(key, token, tensors, outputs, grads)``,
  another opaque op. Its kernel differentiates the kept application with
  torch's engine, into the private leaves' ``.grad``
  (``torch.autograd.grad(allow_unused=True)`` costs 200 us more a call):
  the Function's own ``backward`` runs with its ``ctx``, grads materialized
  as the ``ctx`` asks (``None`` for the outputs no gradient reached), and
  ``once_differentiable`` as it is;
- the application is freed when the token dies: after the backward that
  used it (the runtime frees its saved values), or with the forward's
  result when no backward runs. ``retain_graph=True`` keeps it, as it keeps
  eager's ``ctx``.

The autograd formula this replaces applied the Function again in the
backward and traced that application's backward: two forwards a training
step, and the backward's Python run once, at compile time. Double backward
through the program raises, as for any compiled program (the autograd
stage's runtime). Behind dynamo nothing changes (``AppliedBodies``: dynamo
traced the backward; its side effects are dynamo's business).

Where the user's backward returns ``None`` for a tensor that requires grad,
the op returns zeros (an op's outputs are tensors) and notes which on the
application (:func:`undefined_grads`, read through the token): the autograd
stage's runtime turns a gradient that only such outputs reach back into
``None``, so the input keeps eager's ``None`` ``.grad`` (Note [Gradients a
Function's backward leaves undefined] in ``conveyor_autograd.undefined``).
A backward run with a token whose
entry is gone (a saved-tensor hook that copied it) applies the Function again
first, with a warning: its forward side effects then happen twice.

The forward still runs on fake tensors while the program compiles (the probe
and each trace's fake kernel): side effects of a forward also happen then.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any, Optional

import torch

from conveyor.frontend.function_arguments import Arguments, Grads

#: the ops' qualified names, as graphs show them
FORWARD_OP = "conveyor::apply_function_recorded"
BACKWARD_OP = "conveyor::function_backward"


@dataclass(frozen=True)
class Applied:
    """One application site of a Function class in the program.

    :ivar requires: whether each tensor argument requires grad (eager's
        ``ctx.needs_input_grad``)."""

    cls: type
    arguments: Arguments
    single: bool
    non_differentiable: tuple[int, ...]
    requires: tuple[bool, ...]

    def call(self, tensors: Sequence[torch.Tensor], ints: Sequence[Any]) -> list[torch.Tensor]:
        out = _original_apply(self.cls, *self.arguments.fill(tensors, ints))
        return [out] if self.single else list(out)

    def forward(self, tensors: Sequence[torch.Tensor], ints: Sequence[Any]) -> list[torch.Tensor]:
        """The outputs, computed without grad."""
        with torch.no_grad():
            return self.call(tensors, ints)

    def record(self, tensors: Sequence[torch.Tensor], ints: Sequence[Any]) -> _Record:
        """Apply the Function with autograd recording, as eager does."""
        with torch.enable_grad(), autograd_dispatched():
            leaves = [t.detach().requires_grad_(r) for t, r in zip(tensors, self.requires, strict=True)]
            return _Record(self.call(leaves, ints), leaves)


class _Record:
    """One application kept for its backward: its outputs (with their
    autograd graph, the Function's ``ctx``) and the leaves it was applied to."""

    __slots__ = ("__weakref__", "leaves", "outputs", "undefined")

    def __init__(self, outputs: list[torch.Tensor], leaves: list[torch.Tensor]) -> None:
        self.outputs, self.leaves = outputs, leaves
        #: after a backward: whether each gradient it returned was ``None`` (the op returned zeros)
        self.undefined: tuple[bool, ...] = ()

    def gradients(self, grads: Grads) -> Grads:
        """The gradient of each leaf that requires grad (``None`` where none reached it)."""
        wrt = [t for t in self.leaves if t.requires_grad]
        pairs = [(o, g) for o, g in zip(self.outputs, grads, strict=True) if g is not None and o.requires_grad]
        if not pairs or not wrt:
            return [None] * len(wrt)
        from torch._dynamo import compiled_autograd  # Note [Joint trace under compiled autograd] (autograd stage)

        for t in wrt:
            t.grad = None
        # into the private leaves' .grad: torch.autograd.grad(allow_unused=True) costs 200 us more
        with compiled_autograd._disable(), autograd_dispatched():
            torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs], retain_graph=True, inputs=wrt)
        found = [t.grad for t in wrt]
        for t in wrt:
            t.grad = None
        return found


@contextlib.contextmanager
def autograd_dispatched() -> Iterator[None]:
    """Autograd's dispatch keys in effect again inside an op's kernel.

    Note [Autograd inside the record's kernels]: a custom op's kernel runs
    below autograd (its autograd formula dispatches under
    ``_AutoDispatchBelowAutograd``, which excludes autograd's keys for the
    thread), so the ops a Function's forward or backward calls there record
    no history. A Function that differentiates inside itself then gets no
    gradient: ``torch.cond``'s autograd Function computes its branches'
    gradients with a joint trace, which read every one as ``None`` and
    returned zeros (h_sweep4's B5, behind dynamo and under
    ``conveyor.compile``). The kernels apply the Function, and run its
    backward, with the thread's exclusions as they were minus autograd's, as
    in eager."""
    exclude = torch._C._dispatch_tls_local_exclude_set() - _AUTOGRAD_KEYS
    with torch._C._ForceDispatchKeyGuard(torch._C._dispatch_tls_local_include_set(), exclude):
        yield


_AUTOGRAD_KEYS = (
    torch._C.DispatchKeySet(torch._C.DispatchKey.AutogradFunctionality)
    | torch._C.DispatchKeySet(torch._C.DispatchKey.AutogradOther)
    | torch._C.DispatchKeySet(torch._C.DispatchKey.AutogradNestedTensor)
)


#: an application's entry, on its token (Note [A Function's backward at run time])
_RECORD_ATTR = "_conveyor_function_record"
_APPLIED: dict[int, Applied] = {}
_LIVE: weakref.WeakSet[_Record] = weakref.WeakSet()


def register(key: int, applied: Applied) -> None:
    _APPLIED[key] = applied


def live_records() -> int:
    """How many applications are kept for a backward (for tests)."""
    return len(_LIVE)


def _original_apply(cls: type, *args: Any) -> Any:
    from conveyor.frontend.fallback import original_apply  # the unwrapped Function.apply

    return original_apply(cls, *args)


def _storages(tensors: Sequence[torch.Tensor | None]) -> set[int]:
    return {t.untyped_storage().data_ptr() for t in tensors if t is not None and t.layout is torch.strided}


@functools.cache
def _forward_op() -> Any:
    """The forward op, defined on first use (its autograd formula records the backward op)."""

    @torch.library.custom_op(FORWARD_OP, mutates_args=())
    def apply_function_recorded(key: int, tensors: list[torch.Tensor], ints: list[int]) -> list[torch.Tensor]:
        record = _APPLIED[key].record(tensors, ints)
        token = torch.empty((), dtype=torch.int64)
        setattr(token, _RECORD_ATTR, record)  # lives as long as the token
        _LIVE.add(record)
        return [*(o.detach() for o in record.outputs), token]

    @apply_function_recorded.register_fake
    def _(key: int, tensors: list[torch.Tensor], ints: list[int]) -> list[torch.Tensor]:
        return [*_APPLIED[key].forward(tensors, ints), torch.empty((), dtype=torch.int64, device="cpu")]

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        key, tensors, ints = inputs
        ctx.key, ctx.ints = key, ints
        ctx.set_materialize_grads(False)  # the Function's own ctx materializes, or not
        ctx.save_for_backward(output[-1], *tensors, *output[:-1])
        marked = _APPLIED[key].non_differentiable
        if marked:
            ctx.mark_non_differentiable(*(output[i] for i in marked))

    def backward(ctx: Any, grads: Grads) -> tuple[None, Grads, list[None] | None]:
        applied = _APPLIED[ctx.key]
        token, *rest = ctx.saved_tensors
        n = len(applied.requires)
        tensors, outputs = rest[:n], rest[n:]
        found = iter(_backward_op()(ctx.key, token, tensors, outputs, list(grads)[:-1], ctx.ints))
        return None, [next(found) if r else None for r in applied.requires], None if ctx.ints else []

    apply_function_recorded.register_autograd(backward, setup_context=setup_context)
    return torch.ops.conveyor.apply_function_recorded.default


@functools.cache
def _backward_op() -> Any:
    @torch.library.custom_op(BACKWARD_OP, mutates_args=())
    def function_backward(
        key: int,
        token: torch.Tensor,
        tensors: list[torch.Tensor],
        outputs: list[torch.Tensor],
        grads: list[Optional[torch.Tensor]],  # noqa: UP045  (the schema parser reads Optional)
        ints: list[int],
    ) -> list[torch.Tensor]:
        applied = _APPLIED[key]
        record = getattr(token, _RECORD_ATTR, None)
        if record is None:
            warnings.warn(
                f"conveyor: the forward of torch.autograd.Function {applied.cls.__qualname__} that this backward "
                "belongs to is gone (a saved-tensor hook copied its token?); it runs again before its backward "
                "(Note [A Function's backward at run time] in conveyor.frontend.function_records)",
                stacklevel=2,
            )
            record = applied.record(tensors, ints)
        found = record.gradients(grads)
        record.undefined = tuple(g is None for g in found)
        wanted = [t for t, r in zip(tensors, applied.requires, strict=True) if r]
        taken = _storages([token, *tensors, *outputs, *grads])
        return [_as_input_grad(g, t, taken) for g, t in zip(found, wanted, strict=True)]

    @function_backward.register_fake
    def _(
        key: int,
        token: torch.Tensor,
        tensors: list[torch.Tensor],
        outputs: list[torch.Tensor],
        grads: list[Optional[torch.Tensor]],  # noqa: UP045
        ints: list[int],
    ) -> list[torch.Tensor]:
        return [torch.empty_like(t) for t, r in zip(tensors, _APPLIED[key].requires, strict=True) if r]

    return torch.ops.conveyor.function_backward.default


def undefined_grads(token: torch.Tensor) -> tuple[bool, ...]:
    """Whether each gradient the last ``conveyor::function_backward`` run with
    ``token`` returned was ``None`` in the Function's ``backward`` (the op
    returned zeros for it); ``()`` where ``token`` carries no application."""
    record = getattr(token, _RECORD_ATTR, None)
    return record.undefined if isinstance(record, _Record) else ()


def _as_input_grad(g: torch.Tensor | None, t: torch.Tensor, taken: set[int]) -> torch.Tensor:
    """``g`` as the op's output for input ``t``: zeros for ``None``, with the
    strides of ``empty_like(t)`` (the fake kernel's), and sharing no memory
    with the op's arguments (a custom op's outputs alias none)."""
    if g is None:
        return torch.zeros_like(t)
    out = torch.empty_like(t)
    shares = g.layout is torch.strided and g.untyped_storage().data_ptr() in taken
    return g if out.stride() == g.stride() and not shares else out.copy_(g)


def apply_recorded(applied: Applied, key: int, tensors: list[torch.Tensor], ints: list[Any]) -> list[torch.Tensor]:
    """Apply ``applied`` as one ``conveyor::apply_function_recorded`` node; its outputs (the token left out)."""
    register(key, applied)
    return list(_forward_op()(key, tensors, ints))[:-1]


def is_function_op(target: Any) -> bool:
    """Whether an FX node's target is one of this module's ops."""
    return isinstance(target, torch._ops.OpOverload) and target.name() in (FORWARD_OP, BACKWARD_OP)
