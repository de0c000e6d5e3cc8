"""In-place view ops (``unsqueeze_``, ``t_``, ``as_strided_``...) on a view that
requires grad run eagerly, with a warning (Note [In-place view ops on a view
that requires grad] in ``conveyor.frontend.autograd_state``); on tensors that
are not views, or without grad, they compile."""

from __future__ import annotations

import warnings

import conveyor
import pytest
import torch
from conveyor.testing import check

FALLBACK = r"conveyor: running .* eagerly: .*(In-place view ops on a view that requires grad|as_strided_ of a tensor)"
AS_STRIDED = r"conveyor: running .* eagerly: .*Note \[as_strided_ of a tensor that requires grad\]"
#: name -> (the op, the input's shape)
OPS = {
    "unsqueeze_": (lambda v: v.unsqueeze_(1), (5, 5)),
    "squeeze_": (lambda v: v.squeeze_(), (5, 1, 5)),
    "as_strided_": (lambda v: v.as_strided_((25,), (1,)), (5, 5)),
    "t_": (lambda v: v.t_(), (5, 5)),
    "transpose_": (lambda v: v.transpose_(0, 1), (5, 5)),
}


def _compile(fn):
    return conveyor.compile(fn, backend="eager")


@pytest.mark.parametrize("op", sorted(OPS))
def test_an_inplace_view_op_on_a_view_then_a_write_through_it(op: str) -> None:
    """test_view_ops.py's test_unsqueeze_inplace_view and its siblings, with
    grad: the capture failed (``select() cannot be applied to a 0-dim tensor``)."""

    apply, shape = OPS[op]

    def fn(t):
        v = apply(t.view_as(t))
        v.reshape(-1)[6] = 0  # a view: v is contiguous after each op but t_ and transpose_
        v[0].mul_(2)
        return t, v

    with pytest.warns(UserWarning, match=FALLBACK):
        check(fn, torch.randn(*shape, requires_grad=True) * 1, compile=_compile)


@pytest.mark.parametrize("grad", [False, True], ids=["plain", "grad"])
def test_an_inplace_view_op_on_a_tensor_that_is_no_view_compiles(grad: bool) -> None:
    def fn(t):
        t.unsqueeze_(1)
        t[0, 0, 1] = 0
        return t

    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="conveyor:")
        check(fn, torch.randn(5, 5, requires_grad=grad) * 1, compile=_compile)


def test_an_inplace_view_op_on_a_view_without_grad_compiles() -> None:
    def fn(t):
        v = t.view_as(t).unsqueeze_(1)
        v[0, 0, 1] = 0
        return t, v

    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="conveyor:")
        check(fn, torch.randn(5, 5), compile=_compile)


def _base_restrided_with_an_input_view(x, y):
    x.add_(1)
    x.as_strided_((1,), (1,), x.storage_offset())
    return x * 1, y * 1


def _base_restrided_with_a_view_made_before(x):
    v = x.transpose(0, 1)
    x.as_strided_((2, 2), (1, 2), 0)
    return x * 1, v * 1


@pytest.mark.parametrize("case", ["input_view", "view_made_before"])
def test_as_strided_of_a_base_that_requires_grad_runs_eagerly(case: str) -> None:
    """Note [as_strided_ of a tensor that requires grad]: eager's gradient of the
    other view reaches only the elements the re-strided base kept; the compiled
    one reached every element (the aliasing-families fuzzer run long, cplx family,
    seed 2 on torch 2.14), or the capture raised IndexError (a view made before)."""
    r = torch.randn(2, 2, 2, dtype=torch.float64, requires_grad=True) * 1
    fn, inputs = (
        (_base_restrided_with_an_input_view, (r, r.transpose(0, 1)))
        if case == "input_view"
        else (_base_restrided_with_a_view_made_before, (r,))
    )
    with pytest.warns(UserWarning, match=AS_STRIDED):
        check(fn, *inputs, compile=_compile)


def test_as_strided_of_a_base_without_grad_compiles() -> None:
    r = torch.randn(2, 2, 2, dtype=torch.float64)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="conveyor:")
        check(_base_restrided_with_an_input_view, r, r.transpose(0, 1), compile=_compile)
