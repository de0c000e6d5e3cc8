"""Programs transcribed from PyTorch's ``test/test_view_ops.py`` (class ``TestViewOps``):
the bodies that compute on tensors, without the assertions about torch internals
(``_is_view``, ``_base``, ``data_ptr``), as small functions over small CPU tensors.

Where upstream takes a view and writes through it (``v[0] = 0``), the program does
the same and returns the base and the view, so the checker compares the write's
effect on the input and the outputs' aliasing. Each view op also comes in three
shapes (:func:`view_family`): the view of the input returned (``<name>``), a write
through it with the input and the view returned (``<name>_write``), and the same on
an intermediate (``<name>_write_intermediate``). Names are the upstream tests'
without ``test_``. :data:`PROGRAMS` is run by ``test_view_ops_programs.py``
through ``dynamo_repro_programs.run`` (both entries, with and without grad).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from dynamo_repro_programs import Make, Program, args, randn

PROGRAMS: dict[str, Program] = {}


def fn(name: str, make: Make) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def register(f: Callable[..., Any]) -> Callable[..., Any]:
        assert name not in PROGRAMS, name
        PROGRAMS[name] = Program(name, lambda: f, make)
        return f

    return register


def _randn(shape: tuple[int, ...]) -> Make:
    return lambda: [torch.randn(shape)]


def view_family(name: str, shape: tuple[int, ...], view: Callable[[torch.Tensor], torch.Tensor], idx: Any) -> None:
    """``<name>``: the view of the input returned; ``<name>_write``: ``v[idx] = 0``
    through it, the input and the view returned; ``<name>_write_intermediate``: the
    same on a clone made inside."""

    def read(t: torch.Tensor) -> torch.Tensor:
        return view(t)

    def write(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        v = view(t)
        v[idx] = 0
        return t, v

    def write_intermediate(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        t = x.clone()
        v = view(t)
        v[idx] = 0
        return t, v * 2

    for suffix, f in (("", read), ("_write", write), ("_write_intermediate", write_intermediate)):
        fn(name + suffix, _randn(shape))(f)


# -- one view op each: test_<op>_view ----------------------------------------

view_family("diagonal_view", (5, 5), torch.diagonal, (0,))
view_family("diagonal_view_offset", (3, 3, 3), lambda t: torch.diagonal(t, offset=1, dim1=1, dim2=2), (0, 0))
view_family("select_view", (5, 5), lambda t: t.select(0, 2), (0,))
view_family("expand_view", (5, 1), lambda t: t.expand(5, 5), (2, 2))
view_family("narrow_view", (5, 5), lambda t: torch.narrow(t, 1, 2, 2), (0, 0))
view_family("permute_view", (5, 5), lambda t: t.permute(1, 0), (0, 1))
view_family("transpose_view_swapdims", (5, 5), lambda t: torch.swapdims(t, 0, 1), (0, 1))
view_family("transpose_view_swapaxes", (5, 5), lambda t: torch.swapaxes(t, 0, 1), (0, 1))
view_family("transpose_view", (5, 5), lambda t: torch.transpose(t, 0, 1), (0, 1))
view_family("t_view", (5, 5), lambda t: t.t(), (0, 1))
view_family("T_view", (5, 5), lambda t: t.T, (0, 1))
view_family("T_view_mT", (5, 5), lambda t: t.mT, (0, 1))
view_family("T_view_H", (5, 5), lambda t: t.H, (0, 1))
view_family("unfold_view", (10,), lambda t: t.unfold(0, 3, 2), (1, 0))
view_family("squeeze_view", (5, 1, 5), torch.squeeze, (0, 1))
view_family("unsqueeze_view", (5, 5), lambda t: torch.unsqueeze(t, 1), (0, 0, 1))
view_family("as_strided_view", (5, 5), lambda t: torch.as_strided(t, (25,), (1,)), (6,))
view_family("view_view", (5, 5), lambda t: t.view(25), (6,))
view_family("reshape_view", (5, 5), lambda t: torch.reshape(t, (25,)), (6,))
view_family("reshape_nonview", (5, 5), lambda t: torch.reshape(t.t(), (25,)), (6,))
view_family("contiguous_nonview", (5, 5), lambda t: t.t().contiguous(), (0, 0))
view_family("flatten_view", (1, 2, 3, 4), lambda t: t.flatten(), (0,))
view_family("flatten_view_0d", (), lambda t: t.flatten(), (0,))
view_family("flatten_view_transposed", (1, 2, 3, 4), lambda t: t.transpose(2, 3).flatten(0, 1), (0, 0, 0))
view_family("flatten_nonview", (2, 3, 2, 3), lambda t: t.transpose(2, 3).flatten(1, 3), (0, 0))
view_family("flatten_nonview_T", (2, 2), lambda t: t.T.flatten(), (0,))
view_family("basic_indexing_slice_view", (5, 5), lambda t: t[:2, :3], (0, 0))
view_family("basic_indexing_ellipses_view", (5, 5), lambda t: t[..., :2], (0, 0))
view_family("basic_indexing_newaxis_view", (5, 5), lambda t: t[None, :2, 3], (0, 0))
view_family("movedim_view", (3, 3), lambda t: torch.movedim(t, (0, 1), (1, 0)), (1, 2))
view_family("movedim_view_moveaxis", (3, 3), lambda t: torch.moveaxis(t, 0, 1), (2, 0))
view_family("unflatten_view", (4, 6), lambda t: t.unflatten(1, (2, 3)), (1, 1, 2))
view_family("view_of_view_of_view", (4, 6), lambda t: t[1:].t().unsqueeze(0)[:, 2:4], (0, 1, 2))


@fn("expand_as_view", randn((5, 1), (5, 5)))
def expand_as_view(t, e):
    v = t.expand_as(e)
    v[2, 2] = 0
    return t, v


@fn("view_as_view", randn((5, 5), (25,)))
def view_as_view(t, e):
    v = t.view_as(e)
    v[6] = 0
    return t, v


@fn("reshape_as_view", randn((5, 5), (25,)))
def reshape_as_view(t, e):
    v = t.reshape_as(e)
    v[6] = 0
    return t, v


@fn("flatten_view_as_strided_groups", randn((720,)))
def flatten_view_as_strided_groups(base):
    t = base.as_strided((2, 3, 2, 3, 5, 4), (6, 2, 15, 5, 1, 0))
    v1 = t.flatten(0, 1)
    v2 = v1.flatten(1, 3)
    v3 = v2.flatten(2, 2)
    for v in (v1, v2, v3):
        v[(0,) * v.ndim] = 0
    return t, v1, v2, v3


# -- in-place view ops: metadata changes of a view (and of the input itself) --

def _inplace_family(name: str, shape: tuple[int, ...], op: Callable[[torch.Tensor], torch.Tensor], idx: Any) -> None:
    def on_view(t):
        v = op(t.view_as(t))
        v[idx] = 0
        return t, v

    def on_input(t):
        v = op(t)
        v[idx] = 0
        return v

    def on_input_no_write(t):
        return op(t).sum()

    fn(name, _randn(shape))(on_view)
    fn(name + "_on_input", _randn(shape))(on_input)
    fn(name + "_on_input_no_return", _randn(shape))(on_input_no_write)


_inplace_family("transpose_inplace_view_swapdims", (5, 5), lambda v: v.swapdims_(0, 1), (0, 1))
_inplace_family("transpose_inplace_view_swapaxes", (5, 5), lambda v: v.swapaxes_(0, 1), (0, 1))
_inplace_family("transpose_inplace_view", (5, 5), lambda v: v.transpose_(0, 1), (0, 1))
_inplace_family("t_inplace_view", (5, 5), lambda v: v.t_(), (0, 1))
_inplace_family("squeeze_inplace_view", (5, 1, 5), lambda v: v.squeeze_(), (0, 1))
_inplace_family("unsqueeze_inplace_view", (5, 5), lambda v: v.unsqueeze_(1), (0, 0, 1))
_inplace_family("as_strided_inplace_view", (5, 5), lambda v: v.as_strided_((25,), (1,)), (6,))


@fn("unsqueeze_clone_inplace", randn((2, 3, 4)))
def unsqueeze_clone_inplace(x):  # TestOldViewOps.test_unsqueeze
    y = x.unsqueeze(1)
    z = x.clone().unsqueeze_(2)
    xs = x[:, 1]
    return y, z, xs.unsqueeze(1), xs.clone().unsqueeze_(2)


# -- multi-output views --------------------------------------------------------


@fn("unbind_view", randn((5, 5)))
def unbind_view(t):
    tup = torch.unbind(t)
    for i, v in enumerate(tup):
        v[0] = i + 1
    return t, tup


@fn("unbind_view_write_base", randn((5, 5)))
def unbind_view_write_base(t):
    tup = torch.unbind(t)
    t[2, 0] = 7
    return tup


@fn("unbind", randn((3, 10, 10)))
def unbind(stacked):
    x, y, z = stacked.unbind()
    return x * 2, y, z.sum()


@fn("chunk_view", randn((3, 3)))
def chunk_view(t):
    chunks = torch.chunk(t, 3)
    for i, v in enumerate(chunks):
        v[0, 0] = i + 1
    return t, chunks


@fn("split_view", randn((3, 3)))
def split_view(t):
    parts = torch.split(t, [1, 1, 1])
    for i, v in enumerate(parts):
        v[0, 0] = i + 1
    return t, parts


@fn("split_view_intermediate", randn((3, 3)))
def split_view_intermediate(x):
    t = x * 1
    parts = torch.split(t, [1, 1, 1])
    for i, v in enumerate(parts):
        v[0, 0] = i + 1
    return t.sum(0), [p * 2 for p in parts]


def _split_write_base(name: str, split: Callable[[torch.Tensor], Any], where: tuple[int, ...]) -> None:
    @fn(name, randn((4, 4, 4)))
    def f(t):
        parts = split(t)
        t[where] = 7
        return parts

    @fn(name + "_write_view", randn((4, 4, 4)))
    def g(t):
        parts = split(t)
        parts[1].mul_(2)
        return t, parts


_split_write_base("view_tensor_split", lambda t: t.tensor_split(3, 1), (2, 2, 2))
_split_write_base("view_tensor_hsplit", lambda t: torch.hsplit(t, 2), (2, 2, 2))
_split_write_base("view_tensor_vsplit", lambda t: torch.vsplit(t, 2), (2, 2, 2))
_split_write_base("view_tensor_dsplit", lambda t: torch.dsplit(t, 2), (2, 2, 2))


# -- view(dtype), view_as_complex / view_as_real, real / imag, conj ----------------


def _cplx(*shape: int) -> Make:
    return lambda: [torch.randn(*shape, dtype=torch.complex64)]


fn("view_dtype_new_same_size", randn((4, 4, 8)))(lambda a: a.view(torch.int32))
fn("view_dtype_new_downsize", randn((4, 4, 8)))(lambda a: a.view(torch.float16))
fn("view_dtype_new_upsize", randn((4, 4, 8)))(lambda a: a.view(torch.float64))
fn("view_dtype_new_permuted", randn((4, 4, 8)))(lambda a: a.permute(1, 0, 2).view(torch.int16))
fn("view_dtype_new_expanded", randn((1, 5, 1)))(lambda a: a.expand(5, 5, 8).view(torch.uint8))
fn("view_dtype_new_sliced", randn((2, 5, 16)))(lambda a: a[1::2, 1:, ::2].view(torch.int32))
fn("view_dtype_new_roundtrip", randn((4, 8)))(lambda a: a.view(torch.int16).view(torch.float32) * 2)
fn("view_dtype_upsize_errors_size", randn((4, 4, 3)))(lambda a: a.view(torch.float64))
fn("view_dtype_upsize_errors_offset", randn((4, 4, 3)))(lambda a: a[:, :, 1:].view(torch.float64))
fn("view_dtype_upsize_errors_stride", randn((4, 4, 2)))(lambda a: a.as_strided((4, 4, 2), (2, 1, 1)).view(torch.float64))
fn("view_dtype_dim0_error", _randn(()))(lambda a: a.view(torch.float16))


@fn("view_dtype_write", randn((4, 8)))
def view_dtype_write(a):
    v = a.view(torch.int32)
    v[0].bitwise_and_(-65536)
    return a, v


@fn("view_dtype_write_downsize", randn((4, 8)))
def view_dtype_write_downsize(a):
    v = a.view(torch.int16)
    v[:, ::2] = 0
    return a


fn("view_as_complex", randn((3, 2, 2)))(torch.view_as_complex)
fn("view_as_complex_transposed", randn((3, 2, 2)))(lambda t: torch.view_as_complex(t.transpose(0, 1)))
fn("view_as_complex_error_size", randn((3, 2, 2)))(lambda t: torch.view_as_complex(t.transpose(0, 2)))
fn("view_as_complex_error_stride", randn((3, 2, 2)))(lambda t: torch.view_as_complex(t.transpose(1, 2)))
fn("view_as_complex_error_as_strided", randn((3, 3)))(lambda x: torch.view_as_complex(torch.as_strided(x, (2, 2), (1, 1))))
fn("view_as_complex_empty", args(lambda: torch.tensor([])))(lambda x: torch.view_as_complex(x.reshape(0, 2)))


@fn("view_as_complex_write", randn((3, 2, 2)))
def view_as_complex_write(t):
    c = torch.view_as_complex(t)
    c.mul_(1j)
    return t, c


@fn("view_as_complex_write_intermediate", randn((3, 2, 2)))
def view_as_complex_write_intermediate(x):
    t = x * 2
    c = torch.view_as_complex(t)
    c[1] = 0
    return t, c.abs()


fn("view_as_real", _cplx(3, 4))(torch.view_as_real)
fn("view_as_real_transposed", _cplx(3, 4))(lambda t: torch.view_as_real(t.t()))
fn("view_as_real_empty", args(lambda: torch.tensor([], dtype=torch.complex64)))(torch.view_as_real)
fn("view_as_real_0d", args(lambda: torch.tensor(2 + 3j, dtype=torch.complex64)))(torch.view_as_real)
fn("view_as_real_of_complex_from_float", randn((3, 4, 2)))(
    lambda x: torch.view_as_real(torch.view_as_complex(x) * 2)
)


@fn("view_as_real_write", _cplx(3, 4))
def view_as_real_write(t):
    r = torch.view_as_real(t)
    r[..., 1] = 0
    return t, r


@fn("real_imag_view", _cplx(3, 3))
def real_imag_view(t):
    u = t.T
    return t.real, t.imag, u.real, u.imag


@fn("real_imag_view_offset", _cplx(10))
def real_imag_view_offset(a):
    return a[5:].real, a.real[5:], a[5:].imag, a.imag[5:]


@fn("real_imag_view_write", _cplx(3, 3))
def real_imag_view_write(t):
    re = t.T.real
    re[0].zero_()
    t.imag[1] = 5
    return t, re


fn("conj_imag_view", _cplx(4, 5))(lambda t: (t.conj(), t.conj().imag))
fn("conj_imag_view_from_float", randn((4, 5, 2)))(lambda x: torch.view_as_complex(x).conj().imag * 2)


@fn("conj_view_with_shared_memory", _cplx(4, 5))
def conj_view_with_shared_memory(a):
    b = a.conj()
    c = a.conj()
    r1 = torch.add(a, b)
    a.add_(b)
    r2 = torch.add(b, c)
    torch.add(b, c, out=a)
    r3 = torch.add(b, c)
    b.add_(c)
    return r1, r2, r3, a, b


@fn("set_real_imag", args(lambda: torch.randn(10, dtype=torch.complex64), lambda: torch.randn(10), lambda: torch.randn(10)))
def set_real_imag(x, new_real, new_imag):
    x.real = new_real
    x.imag = new_imag
    return x.abs()


@fn("set_real_imag_from_int", args(lambda: torch.randn(10, dtype=torch.complex64), lambda: torch.arange(10)))
def set_real_imag_from_int(x, n):
    x.real = n
    x.imag = -n
    return x


# -- as_strided (gradients), view_copy --------------------------------------------


def _as_strided(name: str, make: Make, prepro: Callable[[torch.Tensor], torch.Tensor] | None, size, strides, offset=None) -> None:
    def f(x):
        y = prepro(x) if prepro is not None else x
        return y.as_strided(size, strides, offset)

    fn(name, make)(f)


_as_strided("as_strided_gradients_view", lambda: [torch.arange(0, 25, dtype=torch.float64)], lambda x: x.view(5, 5), [3, 3], [6, 2], 2)
_as_strided("as_strided_gradients_size1_stride", randn((12,)), None, [1, 2, 1, 5], [0, 5, 100, 1], 2)
_as_strided("as_strided_gradients_expand", randn((5,)), None, [3, 3, 3], [0, 1, 0], 2)
_as_strided("as_strided_gradients_expand_all", randn((5,)), None, [3, 3, 3], [0, 0, 0], 4)
_as_strided("as_strided_gradients_of_expand", randn((5,)), lambda x: x.expand(5, 5), [5, 5], [0, 1], 0)
_as_strided("as_strided_gradients_overlapping", randn((35,)), None, [6, 6], [5, 1], 2)
_as_strided("as_strided_gradients_overlapping2", randn((15,)), None, [3, 2], [3, 6], 2)
_as_strided("as_strided_gradients_transpose", randn((3, 4)), None, [4, 3], [1, 4])
_as_strided("as_strided_gradients_outside", randn((6, 2)), lambda x: x[3:], [3, 2], [2, 1], 0)
_as_strided("as_strided_gradients_select_expanded", randn((2, 3)), lambda x: x.expand(10, 2, 3), [2, 3], [3, 1], 0)


@fn("view_copy", randn((4,)))
def view_copy(a):
    c = torch.view_copy(a, (2, 2))
    c[0, 0] = 0
    return a, c, a.view(2, 2)


@fn("view_copy_out", randn((2, 2), (2,), (4,), (2,), (2,)))
def view_copy_out(a, out, b, out1, out2):
    torch.diagonal_copy(a, out=out)
    torch.split_copy(b, 2, out=(out1, out2))
    return out, out1, out2


# -- indexing ----------------------------------------------------------------------


@fn("advanced_indexing_nonview", randn((3, 3)))
def advanced_indexing_nonview(t):
    nv = t[torch.tensor([[0, 0], [2, 2]]), torch.tensor([[0, 1], [2, 2]])]
    nv[1, 1] = 0
    return t, nv


@fn("advanced_indexing_assignment", randn((3, 3)))
def advanced_indexing_assignment(t):
    t[torch.tensor([[0, 0], [2, 2]]), torch.tensor([[0, 1], [2, 2]])] = 0
    return t


@fn("contiguous_self", randn((5, 5)))
def contiguous_self(t):
    s = t.contiguous()
    s[0, 0] = 0
    return s


@fn("flatten_nonview_same_dim", randn((2, 2)))
def flatten_nonview_same_dim(t):
    nv = t.flatten(1, 1)
    nv[0, 0] = 0
    return nv


def load() -> dict[str, Program]:
    """Both catalogues' programs (``view_ops_catalogue2`` registers here)."""
    import view_ops_catalogue2  # noqa: F401

    return PROGRAMS
