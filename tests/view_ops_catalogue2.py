"""Programs transcribed from PyTorch's ``test/test_view_ops.py``, class
``TestOldViewOps``: reshape aliasing-or-copy, expand, flatten, narrow, split and
chunk, transposes, ``atleast_*d``, broadcasting, ``resize_`` and ``set_`` on
inputs, ``tensor_split``, with writes through the results where upstream only
reads them. Registered in :data:`view_ops_catalogue.PROGRAMS` (names: the upstream
test's without ``test_``, a suffix for each of its programs)."""

from __future__ import annotations

import torch
from dynamo_repro_programs import args, randn
from view_ops_catalogue import _cplx, fn


@fn("ravel", randn((5, 5)))
def ravel(src):
    flat = src.ravel()
    nc_flat = src.t().ravel()
    flat[3] = 0
    nc_flat[4] = 1
    return src, flat, nc_flat, src[::2].ravel()


fn("ravel_0d", args(lambda: torch.tensor(123.0)))(lambda t: t.ravel() * 2)


@fn("empty_reshape", randn((0, 6)))
def empty_reshape(x):
    return x.reshape(1, 0, 6, 1, 1), x.view(1, 0, 6, 1, 1)


fn("empty_reshape_error", randn((0, 6)))(lambda x: x.reshape(0, -1))


@fn("expand", args(lambda: torch.rand(1, 8, 1), lambda: torch.rand(5), lambda: torch.rand(4, 8, 5)))
def expand(tensor, tensor2, template):
    return (
        tensor.expand_as(template),
        tensor.expand(4, 8, 5),
        tensor2.expand_as(template),
        tensor2.expand(1, 5).expand(2, 2, 5),
        tensor2.expand(1, 1, 5),
        tensor.expand(4, -1, 5),
    )


fn("expand_noncontiguous", randn((5, 2, 1, 3)))(lambda x: x[:, 0].expand(2, 5, 4, 3))
fn("expand_error", randn((5,)))(lambda x: x.expand(-1, -1))
fn("expand_empty", args(lambda: torch.zeros(0)))(lambda x: x.expand((0,)))


@fn("view", args(lambda: torch.rand(15), lambda: torch.rand(3, 5)))
def view(tensor, template):
    tensor_view = tensor.view(5, 3)
    tensor_view.fill_(0.25)
    return tensor.view_as(template), tensor.view(-1, 5), tensor.view(3, -1), tensor_view, tensor


fn("view_empty", args(lambda: torch.empty(0)))(lambda e: (e.view(0, 3, 0, 1), e.view(10, 3, -1), e.view(-1)))
fn("view_error_size", randn((15,)))(lambda x: x.view(7, -1))
fn("view_error_empty", args(lambda: torch.empty(0)))(lambda e: e.view(-1, 0))


@fn("view_noncontiguous_dims", args(lambda: torch.rand(4, 2, 5, 1, 3, 2, 3, 3)))
def view_noncontiguous_dims(x):
    tensor = x.transpose(-1, 2).transpose(-2, 3)
    a = tensor.view(8, 1, 3, 3, 3, 2, 1, 3, 5)
    b = tensor.view(2, 4, 3, 1, 3, 2, 2, 3, 5, 1)
    a[0, 0, 0] = 0
    return x, a, b


fn("view_noncontiguous_error", randn((4, 2, 5, 1, 3, 2, 3, 3)))(
    lambda x: x.transpose(-1, 2).transpose(-2, 3).view(-1)
)


@fn("view_stride0", randn((1, 1)))
def view_stride0(x):
    t = x.expand(3, 4)
    return t.view(-1), t.view(1, -1, 1), t.view(6, 2, 1)


@fn("reshape", randn((3, 3)))
def reshape(x):
    a = x.reshape(-1)
    b = x.reshape(1, 9, 1)
    a[0] = 0
    return x, a, b


@fn("reshape_copy", randn((4, 4, 4)))
def reshape_copy(x):
    y = x[:, 0, :]
    c = y.reshape(-1)  # a copy
    v = y.reshape(2, 2, 4)  # a view
    c[0] = 1
    v[0, 0, 0] = 2
    return x, c, v


fn("reshape_0d", args(lambda: torch.randn(())))(lambda s: (s.reshape(()), s.reshape(-1)))
fn("reshape_error", randn((3, 3)))(lambda x: x.reshape(-1, -1))
fn("reshape_as", randn((3, 3), (1, 9, 1)))(lambda x, t: x.reshape_as(t))


@fn("reshape_view_semantics", randn((15, 4)))
def reshape_view_semantics(tensor):
    view_tensor = tensor.reshape(20, 3)
    copy_tensor = tensor.transpose(0, 1).reshape(20, 3)
    view_tensor[0, 0] = 0
    copy_tensor[0, 1] = 0
    return tensor, view_tensor, copy_tensor


@fn("reshape_view_semantics_int", args(lambda: torch.arange(60).view(15, 4)))
def reshape_view_semantics_int(tensor):
    v = tensor.reshape(20, 3)
    v[1] = -1
    return tensor, v, tensor.t().reshape(20, 3)


@fn("flatten", randn((5, 5, 5, 5)))
def flatten(src):
    outs = [src.flatten(0, -1), src.flatten(0, 2), src.flatten(1, 2), src.flatten(-2, -1), src.flatten(2, 2)]
    outs[1][0, 0] = 0
    return src, outs


fn("flatten_error", randn((5, 5)))(lambda x: x.flatten(1, 0))
fn("narrow", args(lambda: torch.arange(9).view(3, 3)))(
    lambda x: (x.narrow(0, -1, 1), x.narrow(0, -2, 2), x.narrow(-1, -1, 1), x.narrow(-2, -1, 1))
)


@fn("narrow_write", randn((3, 3)))
def narrow_write(x):
    v = x.narrow(-1, -2, 2)
    v.mul_(3)
    return x, v


@fn("narrow_tensor", args(lambda: torch.arange(9).view(3, 3)))
def narrow_tensor(x):
    return x.narrow(0, torch.tensor(1), 1)


fn("t", args(lambda: torch.randn(()), lambda: torch.arange(4), lambda: torch.rand(2, 3)))(lambda a, b, c: (a.t(), b.t(), c.t()))
fn("t_error", randn((2, 2, 2)))(lambda x: x.t())


@fn("split", randn((7, 4)))
def split(tensor):
    a = tensor.split(3, 0)
    b = tensor.split([2, 2], 1)
    return a, b


@fn("split_write_base", randn((20, 10)))
def split_write_base(tensor):
    parts = tensor.split([5, 5, 10], 0)
    tensor.mul_(2)
    return parts


@fn("chunk", randn((4, 7)))
def chunk(tensor):
    parts = tensor.chunk(3, 1)
    tensor[:, 3] = 0
    return parts


fn("chunk_error", randn((4, 7)))(lambda t: t.chunk(0))
fn("T", randn((2, 3, 4), (10,)))(lambda a, b: (a.T, b.T, a.permute(2, 1, 0)))


@fn("transposes", _cplx(2, 3, 4))
def transposes(a):
    m = a[0]
    return m.T, m.H, a.mT, a.mH, a.adjoint()


@fn("transposes_real", randn((2, 3, 4)))
def transposes_real(a):
    v = a.mH
    v[0, 0, 0] = 0
    return a, a.mT, v, a[0].adjoint()


fn("transposes_errors", randn((2,)))(lambda a: a.mT)
fn("transpose_invalid", randn((5, 6, 5, 7)))(lambda x: torch.swapdims(x, 5, 0))
fn("transpose_vs_numpy", randn((2, 3, 5, 4)))(
    lambda x: (torch.swapdims(x, -1, 1), torch.swapaxes(x, 0, -3), torch.transpose(x, 0, 0))
)


def _atleast(name: str, op) -> None:
    make = args(lambda: torch.tensor(0.5), lambda: torch.rand(4), lambda: torch.rand(4, 3), lambda: torch.rand(4, 3, 2), lambda: torch.rand(4, 3, 2, 1))
    fn(name, make)(lambda s, a, b, c, d: op(s, a, b, c, d))
    fn(name + "_one", randn((3,)))(lambda x: op(x))

    @fn(name + "_write", randn((3,)))
    def write(x):
        y = op(x)
        y.mul_(2)
        return x, y


_atleast("atleast_1d", torch.atleast_1d)
_atleast("atleast_2d", torch.atleast_2d)
_atleast("atleast_3d", torch.atleast_3d)
fn("broadcast_tensors", randn((2, 1, 3), (3,), (3, 1)))(torch.broadcast_tensors)
fn("broadcast_to", randn((3, 1)))(lambda t: torch.broadcast_to(t, (4, 3, 2)))
fn("broadcast_to_error", randn((3, 2)))(lambda t: torch.broadcast_to(t, (4, 1, 1)))


# -- resize_ and set_ on inputs (metadata mutations) ----------------------------------


@fn("resize_as_preserves_strides", randn((3, 2)))
def resize_as_preserves_strides(x0):
    x = x0.t()
    x.resize_as_(x)
    return x * 2


fn("resize_input", args(lambda: torch.tensor([[1.0, 2], [3, 4], [5, 6]])))(lambda x: x.resize_((2, 2)))
fn("resize_as_input", args(lambda: torch.tensor([[1.0, 2], [3, 4], [5, 6]]), lambda: torch.ones(2, 3)))(
    lambda x, y: x.resize_as_(y)
)


@fn("memory_format_resize_as", randn((2, 3, 4, 4), (96,)))
def memory_format_resize_as(x, flat):
    xc = x.contiguous(memory_format=torch.channels_last)
    flat.resize_as_(xc, memory_format=torch.preserve_format)
    return flat.stride(), flat * 1


@fn("memory_format_resize_", randn((96,)))
def memory_format_resize_(flat):
    flat.resize_((2, 3, 4, 4), memory_format=torch.channels_last)
    return flat


@fn("contiguous_set_", randn((1, 16, 5, 5)))
def contiguous_set_(x):
    stride = list(x.stride())
    stride[0] = 20
    x.set_(x.untyped_storage(), 0, x.size(), stride)
    return x.is_contiguous(), x * 2


# -- tensor_split ---------------------------------------------------------------------


fn("tensor_split_sections", randn((4, 10)))(lambda a: (torch.tensor_split(a, 3, 1), torch.tensor_split(a.t(), 3, 0)))
fn("tensor_split_sections_tensor", randn((12, 3)))(lambda a: torch.tensor_split(a, torch.tensor(5), 0))
fn("tensor_split_indices", randn((4, 10)))(lambda a: torch.tensor_split(a, (1, 5, 2, 8), -1))
fn("tensor_split_indices_tensor", randn((4, 10)))(lambda a: torch.tensor_split(a, torch.tensor([0, -1, 0, 10]), 1))
fn("tensor_split_errors", randn((10,)))(lambda a: torch.tensor_split(a, 0, 0))


@fn("tensor_split_write", randn((4, 10)))
def tensor_split_write(a):
    parts = torch.tensor_split(a, (2, 5), 1)
    a[1, 3] = 9
    return parts


@fn("view_all_dtypes", args(lambda: torch.tensor([[1, 2], [3, 4], [5, 6]], dtype=torch.int16), lambda: torch.tensor([[True, False]] * 3)))
def view_all_dtypes(x, b):
    return x.view(6), b.view(6), x.view(torch.float16), b.view(torch.uint8)


fn("conj_neg_view_error", _cplx(1))(lambda t: t.conj().view(torch.float64))
fn("conj_neg_view_imag_error", _cplx(1))(lambda t: t.conj().imag.view(torch.int32))
