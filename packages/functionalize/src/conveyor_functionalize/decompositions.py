"""Functional ops that functionalization emits but autograd cannot differentiate.

``x.copy_(src)`` functionalizes to ``aten.copy(x, src)``, which has no
derivative formula: a joint forward+backward traced from the functional
graph (the autograd stage) would fail on it. AOTAutograd never meets it
because it differentiates *above* functionalization; conveyor
functionalizes first, so the functional graph spells ``copy`` with
differentiable ops instead: ``src`` converted to ``x``'s dtype and device,
broadcast to ``x``'s shape, materialized with ``x``'s dense layout, and
selected over ``x`` with ``where``, so that ``x`` gets the zero gradient eager
gives it (not none at all).

``as_strided_scatter`` (a write through an ``as_strided`` view, e.g.
``fill_diagonal_``) has a derivative formula, but a wrong one: torch's
``as_strided_scatter_backward`` gives ``self`` the gradient *inside* the
scattered region and zero outside (the reverse of what it should be; eager
never differentiates it, only functional graphs do). It is spelled as an
out-of-place ``index_put`` into ``self``'s buffer, which autograd
differentiates correctly.

Note [Complex scatters under grad]: a write through a slice or a select
of a complex tensor (``x[1:2].mul_(3)``, ``x[:, 1].zero_()``) functionalizes
to ``slice_scatter`` / ``select_scatter``, which torch cannot differentiate
for complex outputs ("does not support automatic differentiation for outputs
with complex dtype"); eager differentiates the view and the in-place op
instead, and so does AOTAutograd, above functionalization (h_fuzz2's B11:
the autograd stage raised). While the traced program needs gradients
(:data:`GRAD_DECOMPOSITIONS`), such a scatter is spelled on the real view of
both tensors, ``view_as_complex(slice_scatter(view_as_real(self),
view_as_real(src), ...))``: the same values (a complex element is its two
real parts), and every op of it has a complex derivative; ``zero`` (of
``x[:, 1].zero_()``), which has none for complex outputs either, is spelled
``zeros_like``. Without grad these stay as they are.

``bernoulli.p`` is here for the same reason in another guise: the functional
form must draw the random numbers eager's in-place form draws, element for
element.

Note [Python kernels that differ from eager]: functionalization runs the
program under the Python dispatcher (as make_fx and AOTAutograd do), where
torch replaces some ops at the Autograd key with a Python decomposition of
its own (``op.py_kernels``). For most of them the decomposition computes
what the C++ kernel computes; for the ops in :data:`EAGER_KERNELS` it does
not (the values, or the gradient autograd derives from the decomposed ops),
so the functional graph keeps the op itself, traced with the Python
dispatcher off for that one call (:func:`keep_eager_kernels`): eager's kernel
and eager's derivative formula. ``torch.compile(backend="aot_eager")``
inherits these differences; conveyor does not.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import torch
import torch.fx

aten = torch.ops.aten


def _dense_permutation(t: torch.Tensor) -> list[int] | None:
    """The dims of ``t`` from outermost to innermost when ``t`` is dense and
    non-overlapping (so a contiguous buffer permuted back has its strides)."""
    perm = sorted(range(t.dim()), key=lambda d: (-cast(int, t.stride(d)), -cast(int, t.size(d))))
    expected = 1
    for d in reversed(perm):
        if t.size(d) != 1 and t.stride(d) != expected:
            return None
        expected *= t.size(d)
    return perm


def copy(self: torch.Tensor, src: torch.Tensor, non_blocking: bool = False) -> torch.Tensor:
    """``aten.copy``: a new tensor like ``self`` holding ``src``'s values."""
    value = src.to(dtype=self.dtype, device=self.device, non_blocking=non_blocking).expand(self.shape)
    perm = _dense_permutation(self)
    if perm is None or perm == list(range(self.dim())):
        value = value.clone(memory_format=torch.contiguous_format)
    else:
        inverse = [perm.index(d) for d in range(self.dim())]
        value = value.permute(perm).clone(memory_format=torch.contiguous_format).permute(inverse)
    return torch.where(torch.ones((), dtype=torch.bool, device=self.device), value, self)


def as_strided_scatter(
    self: torch.Tensor, src: torch.Tensor, size: Any, stride: Any, storage_offset: Any = None
) -> torch.Tensor:
    """``aten.as_strided_scatter``: ``self.clone()`` (which keeps a dense
    ``self``'s memory order, else is contiguous) with the ``as_strided``
    window of its buffer replaced by ``src``."""
    perm = _dense_permutation(self) or list(range(self.dim()))
    inverse = [perm.index(d) for d in range(self.dim())]
    permuted = self.permute(perm)  # memory order of the clone, outermost first
    buffer = permuted.reshape(-1)
    positions = torch.arange(buffer.numel(), device=self.device).as_strided(size, stride, storage_offset or 0)
    out = buffer.index_put((positions.reshape(-1),), src.to(self.dtype).reshape(-1))
    return out.view(permuted.shape).permute(inverse)


def bernoulli_p(self: torch.Tensor, p: float = 0.5, *, generator: Any = None) -> Any:
    """``aten.bernoulli.p``, what ``x.bernoulli_(p)`` functionalizes to, draws
    into a contiguous buffer; eager's in-place op draws into ``x``'s own
    layout (``dropout`` on a transposed tensor), so the same seed would put
    the same numbers at other elements. Draw in ``x``'s memory order instead."""
    perm = _dense_permutation(self)
    if perm is None or perm == list(range(self.dim())):
        return NotImplemented  # traced as it is
    inverse = [perm.index(d) for d in range(self.dim())]
    return aten.bernoulli.p(self.permute(perm), p, generator=generator).permute(inverse)


def _as_real(t: torch.Tensor) -> torch.Tensor:
    return torch.view_as_real(t.resolve_conj())


def select_scatter(self: torch.Tensor, src: torch.Tensor, dim: int, index: Any) -> Any:
    """``aten.select_scatter`` of complex tensors, on their real views
    (Note [Complex scatters under grad])."""
    if not self.is_complex():
        return NotImplemented
    dim = dim % self.dim()  # the real view adds a last dim
    return torch.view_as_complex(aten.select_scatter(_as_real(self), _as_real(src.to(self.dtype)), dim, index))


def slice_scatter(
    self: torch.Tensor, src: torch.Tensor, dim: int = 0, start: Any = None, end: Any = None, step: Any = 1
) -> Any:
    """``aten.slice_scatter`` of complex tensors, on their real views
    (Note [Complex scatters under grad])."""
    if not self.is_complex():
        return NotImplemented
    dim = dim % self.dim()
    real = aten.slice_scatter(_as_real(self), _as_real(src.to(self.dtype)), dim, start, end, step)
    return torch.view_as_complex(real)


def zero(self: torch.Tensor) -> Any:
    """``aten.zero`` of a complex tensor (what ``x[:, 1].zero_()``
    functionalizes to) as zeros of its layout: no gradient flows through
    either (Note [Complex scatters under grad])."""
    if not self.is_complex():
        return NotImplemented
    return torch.zeros_like(self)


DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {
    aten.copy.default: copy,
    aten.bernoulli.p: bernoulli_p,
    aten.as_strided_scatter.default: as_strided_scatter,
}
#: the table of a trace whose program needs gradients (Note [Complex scatters under grad])
GRAD_DECOMPOSITIONS: dict[Any, Callable[..., Any]] = {
    **DECOMPOSITIONS,
    aten.select_scatter.default: select_scatter,
    aten.slice_scatter.default: slice_scatter,
    aten.zero.default: zero,
}


#: Note [Python kernels that differ from eager]: op -> how its Python kernel
#: differs from eager's (each has a test in tests/test_module_zoo.py or the
#: OpInfo pipeline sweep, tests/test_opinfo_pipeline.py)
EAGER_KERNELS: dict[Any, str] = {
    aten.softshrink.default: "its gradient at NaN is 0 (where(|x| > lambd, ...) picks the zero branch); "
    "eager's softshrink_backward passes the incoming gradient",
    aten.hardshrink.default: "its gradient differs from eager's hardshrink_backward at non-finite inputs "
    "(found by the OpInfo pipeline sweep with NaN / inf written into the samples)",
    aten.multi_margin_loss.default: "a NaN or infinite input gives a NaN loss where eager's kernel gives 0",
    aten.multilabel_margin_loss_forward.default: "wrong for a batch of more than one sample (the gathered "
    "targets, permuted to (C, N, 1), broadcast against the (N, C) input and mix samples)",
}


def call_with_eager_kernel(op: Any, *args: Any, **kwargs: Any) -> Any:
    """``op(*args, **kwargs)`` with the Python dispatcher off: the op's C++
    kernels (and its derivative formula) rather than torch's Python kernel
    (Note [Python kernels that differ from eager])."""
    with torch._C._DisablePythonDispatcher():
        return op(*args, **kwargs)


def keep_eager_kernels(graph: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``graph`` with each op of :data:`EAGER_KERNELS` called through
    :func:`call_with_eager_kernel` (a copy; ``graph`` is unchanged, and
    returned as it is when it has none)."""
    if not any(n.op == "call_function" and n.target in EAGER_KERNELS for n in graph.graph.nodes):
        return graph
    new = torch.fx.Graph()
    new.output(new.graph_copy(graph.graph, {}))
    for node in new.nodes:
        if node.op == "call_function" and node.target in EAGER_KERNELS:
            node.args = (node.target, *node.args)
            node.target = call_with_eager_kernel
    return torch.fx.GraphModule(graph, new)
