"""Compiled programs cut gradients where eager does, through every stage and
both entry points, on every supported torch (core Note [Gradient cuts below
autograd]; the capture-level checks are in ``packages/core/tests``)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import conveyor
import pytest
import torch
from conveyor.testing import check

ENTRIES: dict[str, Callable[[Any], Any]] = {
    "conveyor": conveyor.compile,
    "dynamo": lambda f: torch.compile(f, backend="conveyor"),
}


def _cuts(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
    h = x @ w
    stopped = h.detach()
    return (h * stopped).sum(), stopped, (h.detach() + 1).tanh()


@pytest.mark.parametrize("entry", ENTRIES)
def test_compiled_programs_cut_gradients_where_eager_does(entry: str) -> None:
    compile = ENTRIES[entry]
    x, w = torch.randn(4, 3, requires_grad=True), torch.randn(3, 3, requires_grad=True)
    check(_cuts, x, w, compile=compile)
    outs = compile(_cuts)(x, w)
    assert [o.requires_grad for o in outs] == [True, False, False]


def _detached_first(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    a = (x + 1).transpose(0, 1)  # a view of an intermediate, returned after its detached alias
    return a.detach(), a


def _detached_among_views(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    a = x + 1
    return a.detach(), a.t(), a.view(-1)


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("fn", [_detached_first, _detached_among_views], ids=lambda f: f.__name__)
def test_a_detached_output_beside_its_source_keeps_each_autograd_state(entry: str, fn: Any) -> None:
    """The outputs share memory; the one that requires grad is computed, the
    detached one rebuilt from it (it was the other way round: the output
    that requires grad came back detached)."""
    x = torch.randn(2, 3, requires_grad=True)
    check(fn, x, compile=ENTRIES[entry])
    outs = ENTRIES[entry](fn)(x)
    assert [o.requires_grad for o in outs] == [o.requires_grad for o in fn(x)]


class _Gelu(torch.autograd.Function):
    """BLOOM's GeLU: its own backward."""

    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return x * torch.sigmoid(1.702 * x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        s = torch.sigmoid(1.702 * x)
        return g * (s + 1.702 * x * s * (1 - s))


@torch.library.custom_op("conveyor_test::grad_cuts_scaled", mutates_args=())
def _scaled(x: torch.Tensor) -> torch.Tensor:
    return x * 3


_scaled.register_fake(lambda x: torch.empty_like(x))
_scaled.register_autograd(lambda ctx, g: g * 3)


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("op", [lambda x: _Gelu.apply(x), _scaled], ids=["function", "custom_op"])
def test_a_differentiable_node_replayed_by_a_stage_keeps_carrying_gradient(entry: str, op: Any) -> None:
    """A custom op's (or Function's) own autograd runs it inside a ``no_grad``
    forward; a stage's replay (here dedupe's, for a weight passed twice, as
    BLOOM ties its embeddings) must still record it as run with grad, or the
    gradient of everything before it is silently lost."""

    def fn(w, tied, x):
        return (op(x @ w) @ tied.T).square().sum()

    w = torch.randn(4, 4, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no eager fallback
        check(fn, w, w, torch.randn(2, 4, requires_grad=True), compile=ENTRIES[entry])


@torch.library.custom_op("conveyor_test::grad_cuts_cat", mutates_args=())
def _cat(xs: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat([x.clone() for x in xs])


_cat.register_fake(lambda xs: torch.cat(xs))
_cat.register_autograd(
    lambda ctx, g: (list(g.split(ctx.sizes)),),
    setup_context=lambda ctx, inputs, output: setattr(ctx, "sizes", [x.shape[0] for x in inputs[0]]),
)


@torch.library.custom_op("conveyor_test::grad_cuts_split", mutates_args=())
def _split(x: torch.Tensor) -> list[torch.Tensor]:
    return [t.clone() for t in x.split(2)]


_split.register_fake(lambda x: [t.clone() for t in x.split(2)])
_split.register_autograd(lambda ctx, gs: torch.cat(gs))


@torch.library.custom_op("conveyor_test::grad_cuts_split_n", mutates_args=())
def _split_n(x: torch.Tensor) -> tuple[list[torch.Tensor], int]:
    return [t.clone() for t in x.split(2)], 2


_split_n.register_fake(lambda x: ([t.clone() for t in x.split(2)], 2))
_split_n.register_autograd(lambda ctx, gs, _n: torch.cat(gs))


def _split_n_scaled(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
    parts, n = _split_n(a * b)
    return tuple(t * n for t in parts)


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize(
    "fn",
    [lambda a, b: _cat([a, b * 2]).sin(), lambda a, b: tuple(t * 2 for t in _split(a * b)), _split_n_scaled],
    ids=["tensor_list_argument", "tensor_list_result", "tensor_list_and_int_result"],
)
def test_a_custom_op_over_tensor_lists_carries_gradient(entry: str, fn: Any) -> None:
    """Note [Custom ops called with grad]: torch binds the Function of a custom
    op taking or returning ``Tensor[]`` when the op is defined, past the
    capture's ``Function.apply`` wrapper; its outputs silently stopped
    requiring grad (h_sweep5 B1)."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no eager fallback
        check(fn, torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True), compile=ENTRIES[entry])


def test_a_gradient_of_a_gradient_inside_the_program_is_eagers() -> None:
    """Note [Gradients of gradients in a program]: a physics-informed loss
    (the gradient of u in x, taken with create_graph=True, then squared) gave
    the weights a gradient that missed every path through a saved output
    (tanh's), silently (h_sweep5 B8); it now runs eagerly, warned."""

    def loss(x, w):
        u = (x * w).tanh()
        (ux,) = torch.autograd.grad(u.sum(), x, create_graph=True)
        return (ux**2).sum() + u.sum()

    with pytest.warns(UserWarning, match="create_graph=True"):
        check(loss, torch.randn(5, requires_grad=True), torch.randn(5, requires_grad=True), compile=conveyor.compile)
