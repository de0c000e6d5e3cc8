"""Programs around ``torch.library.custom_op`` rewritten compactly from PyTorch's
``test/test_custom_ops.py`` (``TestCustomOpAPI``, stored version 00b0ce4): the
``inplace`` and ``out`` tags, ``mutates_args`` (named, ``"unknown"``, optional and
list arguments), ``register_autograd`` with defaulted, keyword-only and list
arguments and list returns, factory ops, and a custom op whose output is a view of
its input (schema ``Tensor(a) -> Tensor(a)``). Registered in
:data:`custom_ops_catalogue.PROGRAMS` (names prefixed ``co_``)."""

from __future__ import annotations

from typing import Optional

import numpy as np
import torch
from custom_ops_catalogue import op, ops, program, randn
from torch import Tensor

# -- tags -----------------------------------------------------------------------------

#: ``torch.Tag.inplace`` and ``torch.Tag.out`` (newer than torch 2.11): the tagged programs exist
#: only where this torch has both
TAGGED = hasattr(torch.Tag, "inplace") and hasattr(torch.Tag, "out")

if TAGGED:

    @op("co_inplace_tag", mutates={"x"}, tags=torch.Tag.inplace)
    def _co_inplace_tag(x: Tensor, y: Tensor) -> Tensor:
        x.add_(y)
        return x

    program("co_custom_op_inplace_tag_compile", randn((3,), (3,)), grad=False)(lambda x, y: _co_inplace_tag(x, y))

    @op("co_out_tag", mutates={"out"}, tags=torch.Tag.out)
    def _co_out_tag(x: Tensor, y: Tensor, *, out: Tensor) -> Tensor:
        out.copy_(x + y)
        return out

    program("co_custom_op_out_tag_compile", randn((3,), (3,), (3,)), grad=False)(
        lambda x, y, out: _co_out_tag(x, y, out=out)
    )

    @program("co_inplace_tag_result_mutated", randn((3,), (3,)), grad=False)
    def _p_inplace_tag_result_mutated(x, y):
        r = _co_inplace_tag(x, y)
        r.mul_(2)
        return x.sum()

    @program("co_out_tag_result_mutated", randn((3,), (3,), (3,)), grad=False)
    def _p_out_tag_result_mutated(x, y, out):
        r = _co_out_tag(x, y, out=out)
        r.mul_(2)
        return out + 0

    @op("co_out_tag2", mutates={"add_out", "mul_out"}, tags=torch.Tag.out)
    def _co_out_tag2(x: Tensor, y: Tensor, *, add_out: Tensor, mul_out: Tensor) -> tuple[Tensor, Tensor]:
        add_out.copy_(x + y)
        mul_out.copy_(x * y)
        return add_out, mul_out

    @program("co_custom_op_out_tag_multiple_returns", randn((3,), (3,), (3,), (3,)), grad=False)
    def _p_out_tag2(x, y, a, m):
        r = _co_out_tag2(x, y, add_out=a, mul_out=m)
        return r[0] * 2, r[1]

    @program("co_custom_op_out_tag_no_grad_on_grad_inputs", randn((3,), (3,)))
    def _p_out_tag_no_grad(x, out):
        with torch.no_grad():
            r = _co_out_tag(x, x, out=out)
        return r


# -- mutates_args -----------------------------------------------------------------------


@op("co_sin_inplace", mutates={"x"}, device_types="cpu")
def _co_sin_inplace(x: Tensor) -> None:
    x_np = x.numpy()
    np.sin(x_np, out=x_np)


program("co_mutated", randn((3,)), grad=False)(lambda x: _co_sin_inplace(x))


@program("co_mutated_on_view_of_input", randn((4, 3)), grad=False)
def _p_mutated_view(x):
    _co_sin_inplace(x[1])
    return x.sum(0)


@op("co_mutated_lists", mutates={"y", "z", "w"})
def _co_mutated_lists(x: Tensor, y: Optional[Tensor], z: list[Tensor], w: list[Optional[Tensor]]) -> None:  # noqa: UP045
    if y is not None:
        y.mul_(2)
    for t in z:
        t.add_(x)
    for t in w:
        if t is not None:
            t.sub_(x)


@program("co_mutated_optional_and_list", randn((3,), (3,), (3,), (3,)))
def _p_mutated_lists(x, y, z0, z1):
    _co_mutated_lists(x, y, [z0, z1], [])
    return x + 1


@program("co_mutated_list_of_optional", randn((3,), (3,), (3,)))
def _p_mutated_optional_list(x, w0, w2):
    _co_mutated_lists(x, None, [], [w0, None, w2])
    return x + 1


@op("co_copy_optional_out", mutates={"out"})
def _co_copy_optional_out(x: Tensor, out: Optional[Tensor] = None) -> Tensor:  # noqa: UP045
    if out is not None:
        out.copy_(x)
        return x.new_empty(0)
    return x.clone()


@_co_copy_optional_out.register_fake
def _(x, out=None):
    return x.new_empty(0) if out is not None else torch.empty_like(x)


program("co_mutated_optional_arg_default_none", randn((3,)), grad=False)(lambda x: _co_copy_optional_out(x))
program("co_mutated_optional_arg_given", randn((3,), (3,)), grad=False)(
    lambda x, out: (_co_copy_optional_out(x, out=out), out)
)


@op("co_unknown", mutates="unknown", device_types="cpu")
def _co_unknown(x: Tensor) -> None:
    x_np = x.numpy()
    np.sin(x_np, out=x_np)


@program("co_mutated_unknown", randn((3,)), grad=False)
def _p_unknown(x):
    y = x * 2
    _co_unknown(y)
    _co_unknown(x)
    return y


# -- compile, fake kernels, factories -------------------------------------------------------


@op("co_linear")
def _co_linear(x: Tensor, weight: Tensor, bias: Tensor) -> Tensor:
    return torch.from_numpy(np.add(x.numpy() @ weight.numpy().T, bias.numpy()))


_co_linear.register_fake(lambda x, w, b: x.new_empty(x.size(0), w.size(0)))
program("co_compile", randn((2, 2), (2, 2), (2,)), grad=False)(lambda x, w, b: _co_linear(x, w, b).relu())


@op("co_factory", device_types="cpu")
def _co_factory(device: torch.device) -> Tensor:
    return torch.ones(3)


_co_factory.register_fake(lambda device: torch.empty(3, device=device))
program("co_factory_function", randn((3,)))(lambda x: x * _co_factory(x.device))


# -- register_autograd ----------------------------------------------------------------------


def _save_x(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])


@op("co_np_sin")
def _co_np_sin(x: Tensor) -> Tensor:
    return torch.from_numpy(np.sin(x.detach().numpy()))


_co_np_sin.register_fake(lambda x: torch.empty_like(x))
_co_np_sin.register_autograd(lambda ctx, g: g * ctx.saved_tensors[0].cos(), setup_context=_save_x)
program("co_library_register_autograd", randn((3,)))(lambda x: _co_np_sin(x) * x)


@program("co_no_grad_skips_autograd", randn((3,), (3,)))
def _p_no_grad(x, y):
    with torch.no_grad():
        a = _co_np_sin(x)
    return a + _co_np_sin(y)


@op("co_defaulted")
def _co_defaulted(x: Tensor, y: Optional[Tensor] = None, scale: float = 2.0, enabled: bool = False) -> Tensor:  # noqa: UP045
    return x.sin() * scale


_co_defaulted.register_fake(lambda x, y=None, scale=2.0, enabled=False: torch.empty_like(x))


def _defaulted_ctx(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])
    ctx.scale = inputs[2]


_co_defaulted.register_autograd(
    lambda ctx, g: (g * ctx.saved_tensors[0].cos() * ctx.scale, None, None, None), setup_context=_defaulted_ctx
)
program("co_register_autograd_defaulted_inputs_full_gradients", randn((3,)))(lambda x: _co_defaulted(x))
program("co_register_autograd_defaulted_inputs_given", randn((3,), (3,)))(lambda x, y: _co_defaulted(x, y, 3.0, True))


@op("co_tl_in")
def _co_tl_in(xs: list[Tensor], scale: float = 2.0) -> Tensor:
    return sum(x.sin() for x in xs) * scale


_co_tl_in.register_fake(lambda xs, scale=2.0: torch.empty_like(xs[0]))


def _tl_in_ctx(ctx, inputs, output):
    ctx.save_for_backward(*inputs[0])
    ctx.scale = inputs[1]


_co_tl_in.register_autograd(
    lambda ctx, g: ([g * x.cos() * ctx.scale for x in ctx.saved_tensors], None), setup_context=_tl_in_ctx
)
program("co_register_autograd_tensorlist_defaulted_input", randn((3,), (3,)))(lambda x, y: _co_tl_in([x, y]))
program("co_register_autograd_tensorlist_scale", randn((3,), (3,)))(lambda x, y: _co_tl_in([x, y], 3.0))


@op("co_tl_out")
def _co_tl_out(x: Tensor, scale: float = 2.0) -> list[Tensor]:
    return [x.sin() * scale, x.cos() * scale]


_co_tl_out.register_fake(lambda x, scale=2.0: [torch.empty_like(x), torch.empty_like(x)])


def _tl_out_ctx(ctx, inputs, output):
    ctx.save_for_backward(inputs[0])
    ctx.scale = inputs[1]


def _tl_out_bw(ctx, gs):
    (x,) = ctx.saved_tensors
    return (gs[0] * x.cos() - gs[1] * x.sin()) * ctx.scale, None


_co_tl_out.register_autograd(_tl_out_bw, setup_context=_tl_out_ctx)


@program("co_register_autograd_tensorlist_return_defaulted_input", randn((3,)))
def _p_tl_out(x):
    y0, y1 = _co_tl_out(x, 3.0)
    return y0 + y1


# -- hand-written schemas: keyword-only arguments and defaults, views -------------------------


@op("co_kwonly", schema="(Tensor x, *, float y) -> Tensor")
def _co_kwonly(x, *, y):
    return x * y


_co_kwonly.register_fake(lambda x, *, y: torch.empty_like(x))


def _kwonly_ctx(ctx, inputs, keyword_only_inputs, output):
    ctx.y = keyword_only_inputs["y"]


_co_kwonly.register_autograd(lambda ctx, g: g * ctx.y, setup_context=_kwonly_ctx)
program("co_register_autograd_kwargonly", randn((3,)))(lambda x: _co_kwonly(x, y=3.14))


@op("co_defaults", schema="(Tensor w, int x=2, *, int y=3, int z) -> Tensor")
def _co_defaults(w, x=2, *, y=3, z):
    return w * x * y * z


_co_defaults.register_fake(lambda w, x=2, *, y=3, z: torch.empty_like(w))


def _defaults_ctx(ctx, inputs, keyword_only_inputs, output):
    ctx.c = keyword_only_inputs["y"] * keyword_only_inputs["z"] * inputs[1]


_co_defaults.register_autograd(lambda ctx, g: g * ctx.c, setup_context=_defaults_ctx)
program("co_register_autograd_defaults", randn((3,)))(lambda w: _co_defaults(w, z=42))


@op("co_view", schema="(Tensor(a) x) -> Tensor(a)")
def _co_view(x):
    return x.view_as(x)


_co_view.register_fake(lambda x: x.view_as(x))


def _view_ctx(ctx, inputs, output):
    ctx._is_pure_view = True


_co_view.register_autograd(lambda ctx, g: g, setup_context=_view_ctx)


@program("co_view_op_output_mutated", randn((3,)))
def _p_view_mutated(x):
    y = x.clone()
    v = _co_view(y)
    v.mul_(2)
    return y


program("co_view_op_of_input", randn((3,)))(lambda x: _co_view(x))


@program("co_view_op_of_input_mutated", randn((3,)))
def _p_view_input_mutated(x):
    v = _co_view(x)
    v.add_(1)
    return v.sum()


__all__ = ["ops"]
