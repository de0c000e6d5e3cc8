"""Custom-op programs built on the APIs ``test/test_custom_ops.py`` tests one by one
(``register_autograd`` saving the output or returning None for an input,
``register_vmap``, ``register_autocast``, a fake kernel with a data-dependent int
result or non-contiguous strides), each put into a small program the upstream
file does not compile, and ordering of functional custom ops around a mutating
one. Registered in :data:`custom_ops_catalogue.PROGRAMS` (names prefixed ``cx_``)."""

from __future__ import annotations

import torch
from custom_ops_catalogue import DATA_DEP, op, program, randn
from torch import Tensor


@op("cx_exp")
def _cx_exp(x: Tensor) -> Tensor:
    return x.exp()


_cx_exp.register_fake(lambda x: torch.empty_like(x))


def _save_output(ctx, inputs, output):
    ctx.save_for_backward(output)


_cx_exp.register_autograd(lambda ctx, g: g * ctx.saved_tensors[0], setup_context=_save_output)
program("cx_autograd_saves_output", randn((3, 4)))(lambda x: _cx_exp(x * 2).sum(0))


@program("cx_autograd_op_under_no_grad", randn((3,)))
def _p_no_grad(x):
    with torch.no_grad():
        y = _cx_exp(x)
    return y + _cx_exp(x)


@op("cx_mul_half_grad")
def _cx_mul_half_grad(x: Tensor, y: Tensor) -> Tensor:
    return x * y


_cx_mul_half_grad.register_fake(lambda x, y: torch.empty_like(x))


def _save_inputs(ctx, inputs, output):
    ctx.save_for_backward(*inputs)


_cx_mul_half_grad.register_autograd(lambda ctx, g: (g * ctx.saved_tensors[1], None), setup_context=_save_inputs)
program("cx_autograd_returns_none_for_an_input", randn((3,), (3,)))(lambda x, y: _cx_mul_half_grad(x, y))


@op("cx_mul")
def _cx_mul(x: Tensor, y: Tensor) -> Tensor:
    return x * y


_cx_mul.register_fake(lambda x, y: torch.empty_like(x))
_cx_mul.register_autograd(
    lambda ctx, g: (g * ctx.saved_tensors[1], g * ctx.saved_tensors[0]), setup_context=_save_inputs
)


@_cx_mul.register_vmap
def _(info, in_dims, x, y):
    xb, yb = in_dims
    x = x.movedim(xb, -1) if xb is not None else x.unsqueeze(-1)
    y = y.movedim(yb, -1) if yb is not None else y.unsqueeze(-1)
    return (x * y).movedim(-1, 0), 0


program("cx_library_register_vmap", randn((2, 2), (2, 2)))(lambda x, y: torch.vmap(_cx_mul)(x, y))
program("cx_library_register_vmap_nested", randn((3,), (2,)))(
    lambda x, y: torch.vmap(torch.vmap(_cx_mul, in_dims=(0, None)), in_dims=(None, 0))(x, y)
)


@op("cx_sin")
def _cx_sin(x: Tensor) -> Tensor:
    return torch.sin(x)


_cx_sin.register_fake(lambda x: torch.empty_like(x))
torch.library.register_autocast(_cx_sin, "cpu", torch.bfloat16)


@program("cx_library_register_autocast", randn((3,)), grad=False)
def _p_autocast(x):
    with torch.autocast("cpu", dtype=torch.bfloat16):
        return _cx_sin(x)


@op("cx_count")
def _cx_count(x: Tensor) -> int:
    return int((x > 0).sum())


_cx_count.register_fake(lambda x: torch.library.get_ctx().new_dynamic_size())
program("cx_int_result", randn((5,)), dynamo_config=DATA_DEP)(lambda x: x * _cx_count(x))


@op("cx_column_major")
def _cx_column_major(x: Tensor) -> Tensor:
    return torch.empty_strided(x.shape, (1, x.shape[0])).copy_(x)


_cx_column_major.register_fake(lambda x: torch.empty_strided(x.shape, (1, x.shape[0])))
program("cx_fake_with_column_major_strides", randn((3, 4)), grad=False)(lambda x: _cx_column_major(x) + 1)


@op("cx_add1_", mutates={"x"})
def _cx_add1_(x: Tensor) -> None:
    x.add_(1)


@op("cx_square")
def _cx_square(x: Tensor) -> Tensor:
    return x * x


_cx_square.register_fake(lambda x: torch.empty_like(x))


@program("cx_functional_ops_around_a_mutation", randn((3,)), grad=False)
def _p_order(x):
    y = _cx_square(x)
    _cx_add1_(x)
    return y, _cx_square(x)


@program("cx_mutation_of_a_view_then_read", randn((2, 3)), grad=False)
def _p_order_view(x):
    x = x.clone()
    _cx_add1_(x[0])
    return x.sum(), _cx_square(x)


@program("cx_mutation_of_a_view_of_an_input", randn((4,)), grad=False)
def _p_order_input_view(x):
    y = _cx_square(x)
    _cx_add1_(x[1:])
    return y + x


@program("cx_mutation_then_autograd_op", randn((3,)))
def _p_mut_then_grad(x):
    y = x * 1
    _cx_add1_(y)
    return _cx_exp(y)
