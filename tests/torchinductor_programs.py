"""Small programs transcribed from PyTorch's Inductor and functionalization tests.

Origin: pytorch/pytorch ``test/inductor/test_torchinductor.py`` (``CommonTemplate``:
each ``self.common(fn, args)``; the name is the test's without ``test_``, a
suffix numbers a test's further programs) and ``test/test_functionalization.py``
(names prefixed ``functionalization_``). Rewritten here compactly, with smaller
inputs, favouring mutation, views, in-place ops, indexing and scatter; programs
named ``regression_*`` are not PyTorch's but reductions of bugs these programs found.

Each program is run by :func:`run` through one entry point (``conveyor.compile``
or ``torch.compile(backend="conveyor")``) and one backend (``eager`` or
``inductor``), without grad and (where an input is floating point) with grad:
every floating-point input is then a non-leaf requiring grad (``leaf * 1``, taken
to the original's size, strides and offset, so in-place ops on it are legal as
in eager), and ``conveyor.testing.check`` compares outputs, aliasing, inputs after
the call and the gradients of the leaves with eager's.

The sweep over the whole upstream files (880 programs extracted by running the
test methods with a recording ``self.common``) is in ``/work/reports/h_sweep2.md``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import conveyor
import torch
import torch.nn.functional as F
from conveyor.testing import check

aten = torch.ops.aten

Make = Callable[[], list[Any]]
PROGRAMS: dict[str, tuple[Callable[..., Any], Make]] = {}


def program(name: str, make: Make) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        assert name not in PROGRAMS, name
        PROGRAMS[name] = (fn, make)
        return fn

    return register


def randn(*shapes: tuple[int, ...]) -> Make:
    return lambda: [torch.randn(*s) for s in shapes]


def args(*values: Callable[[], Any]) -> Make:
    return lambda: [v() for v in values]


def lam(name: str, make: Make, fn: Callable[..., Any]) -> None:
    program(name, make)(fn)


# -- pointwise, in place on inputs and intermediates --------------------------------

lam(
    "add_inplace_permuted",
    args(lambda: torch.ones(2, 3, 4, 5).transpose(1, 2), lambda: torch.randn(2, 4, 1, 5)),
    lambda x, y: x.add_(y),
)
lam("abs", randn((17,)), lambda a: (a / (torch.abs(a) + 1),))
lam("sgn", args(lambda: torch.linspace(-10, 10, 41)), lambda a: (torch.sgn(a), torch.sgn(a + 1) - 1))
lam("max_min", randn((8,), (8,)), lambda a, b: (torch.maximum(a, b), torch.minimum(a, b)))
lam("horizonal_fusion1", randn((4, 6, 6), (4, 6, 6), (1, 6, 1)), lambda a, b, c: (a + b, a - c, b * c))
lam("relu", randn((8, 8), (8, 8)), lambda a, b: (torch.relu(a), torch.relu(a + b) / 10))
lam("exp", randn((8, 8), (8, 8)), lambda a, b: (torch.exp(a), torch.exp(a + b)))
lam("sigmoid", randn((8, 8), (8, 8)), lambda a, b: (torch.sigmoid(a), torch.sigmoid(a + b)))
lam(
    "round",
    args(lambda: torch.randn(8, 8) * 100, lambda: torch.randn(8, 8) * 10),
    lambda a, b: (torch.round(a), torch.round(b + 1), torch.round(a, decimals=2)),
)
lam("clamp", randn((8, 8), (8, 8)), lambda a, b: (torch.clamp(a, -0.5, 0.5), torch.clamp(a + b, min=0), a.clamp(b)))
lam("where", randn((8, 8), (8, 8)), lambda a, b: (torch.where(a > b, a, b), torch.where(a > 0, 1.0, a)))
lam("lerp", randn((4, 4), (4, 4)), lambda a, b: (torch.lerp(a, b, 0.3), torch.lerp(a, b, a.sigmoid())))
lam("addcmul", randn((4, 4), (4, 4), (4, 4)), lambda a, b, c: torch.addcmul(a, b, c, value=0.5))
lam(
    "inplace_activations",
    args(lambda: torch.randn(16) * 10),
    lambda x: (
        aten.hardswish_(x + 1),
        aten.hardtanh_(x + 1),
        aten.leaky_relu_(x + 1),
        aten.silu_(x + 1),
        aten.log1p(x + 1),
        aten.masked_fill_(x + 1, torch.zeros_like(x, dtype=torch.bool), 99.0),
        aten.masked_fill_(x + 1, torch.ones_like(x, dtype=torch.bool), 99.0),
    ),
)
lam(
    "inplace_where_pointwise",
    args(lambda: torch.rand(1), lambda: torch.rand(2)),
    lambda a, b: (a.__setitem__(0, 2), a * b)[1],
)
lam("concat_add_inplace", randn((2, 3, 4, 4), (2, 3, 4, 4), (2, 6, 4, 4)), lambda x, y, z: torch.cat([x, y], 1).add_(z))
lam("unsqueeze_inplace", randn((2, 2, 2, 2)), lambda a: (aten.unsqueeze_(a + 1, 2), aten.unsqueeze_(a + 1, 0) + 2))
lam("fill1", randn((6, 6)), lambda x: (torch.ones_like(x), aten.fill.Scalar(torch.ones_like(x), 2)))
lam("fill2", randn((6, 6)), lambda x: (torch.ones_like(x), aten.fill.Tensor(torch.ones_like(x), torch.tensor(3.0))))
lam("zero_element_mutation", args(lambda: torch.randn(0)), lambda x: F.leaky_relu(x, 5.3, inplace=True))
lam("inplace_add_alpha", randn((4, 4), (4, 4)), lambda x, y: x.add_(y, alpha=0.5))
lam("inplace_on_transposed_input", randn((4, 3), (3, 4)), lambda x, y: (x.t().mul_(y), x)[1])
lam("inplace_chain_returns_input", randn((5,)), lambda x: x.mul_(2).add_(1).clamp_(max=2.0))
lam("remove_noop_copy", randn((6, 6), (6,)), lambda x, y: x.cos().copy_(y).sin())


@program("remove_noop_copy.1", args(lambda: torch.randn(6, 6, dtype=torch.float16), lambda: torch.randn(6)))
def _noop_copy_1(a, b):
    b[0] = torch.abs(a).max().to(a.dtype)
    return b


@program("slice_mutation1", randn((8, 8)))
def _slice_mutation1(a):
    x = torch.zeros_like(a)
    b = x + 1
    x[:, 3] = 3.0
    c = torch.clone(x)
    x[4, :] = 4.0
    return x, b, c, x + 1


@program("slice_mutation2", randn((4, 6)))
def _slice_mutation2(a):
    a[:, 2:4] = a[:, 0:2] * 2
    return a.sum(1)


@program("slice_mutation3", randn((5, 4)))
def _slice_mutation3(a):
    a[1:3].mul_(2)
    a[:, ::2].add_(1)
    return a


@program("setitem_with_scalar_index", randn((4, 4)))
def _setitem_scalar(x):
    x[1] = 2.0
    x[:, 2] = x[:, 1] + 1
    return x


# -- views ---------------------------------------------------------------------------

lam("views1", randn((5 * 7,), (5, 7)), lambda x, y: (x.view(5, 7) + y,))
lam("views1.1", randn((5 * 7,), (5, 7)), lambda x, y: ((x + 1).view(5, 7) + y,))
lam("views1.2", randn((2, 2, 2, 2), (4, 4)), lambda x, y: ((x + 1).view(4, 4) + y,))
lam("views1.3", randn((10, 1, 10), (10, 10)), lambda x, y: (x.view(10, 10) + y,))
lam("views2", randn((2, 2, 2, 2)), lambda x: ((x * 2).view(4, -1) + 1,))
lam(
    "views4",
    args(lambda: torch.randn(12, 5, 5), lambda: torch.randint(0, 11, (24,))),
    lambda a, i: a.index_select(0, i).view(2, 3, 4, 5, 5).view(2, 3, 2, 10, -1),
)
lam("views5", randn((4, 8, 4)), lambda x: x[:, 4:].reshape(4, -1, 4))
lam("views6", randn((4, 2, 4, 4)), lambda x: aten.slice(aten.slice(torch.relu(x), 1, 0, 2), 3, 0, 0).view(4, 2, -1))
lam(
    "views7",
    args(lambda: torch.rand(2, 3), lambda: torch.randint(10, (2, 3), dtype=torch.int32)),
    lambda x, y: ((x + 1).view(torch.int32), (y + 1).view(torch.float32)),
)
lam("view_detach", randn((4, 4)), lambda a: a[0].detach())
lam(
    "as_strided",
    randn((16, 16)),
    lambda x: (aten.as_strided(x, (4, 4, 16), (64, 16, 1), 0), aten.as_strided(x + 1, (4, 4, 16), (64, 16, 1), 0) + 2),
)
lam(
    "repeat_as_strided",
    randn((1, 1)),
    lambda x: (lambda f: torch.as_strided(f, (3, 2), f.stride()) * 2)(x.repeat(3, 2)),
)
lam(
    "pad_view",
    args(lambda: torch.rand(2, 3, 6, 6)),
    lambda a: (lambda y: y.view(*y.size()[:-2], y.size(-1), y.size(-2)))(F.pad(a, (0, 0, 0, 1))),
)
lam(
    "reuse_buffers_with_aliasing",
    args(lambda: torch.zeros(4, 2)),
    lambda x: (
        torch.view_as_real(torch.view_as_complex(x + 1)) + 1,
        torch.view_as_real(torch.view_as_complex(x + 1) + 1),
    ),
)
lam("view_as_real", args(lambda: torch.randn(4, 3, dtype=torch.complex64)), lambda x: torch.view_as_real(x * 2))
lam("permute1", randn((2, 3, 4)), lambda a: (torch.permute(a + 1, [2, 1, 0]), torch.permute(a, [2, 1, 0]) + 2))
lam("permute2", randn((4, 8)), lambda a: a.unfold(0, 2, 1).permute(2, 0, 1).sum(0))
lam("expand", randn((3, 1)), lambda a: ((a + 1).expand(3, 4) * 2, a.expand(2, 3, 4) + 2))
lam("squeeze1", randn((1, 2, 1, 2, 2, 1)), lambda a: ((a + 1).squeeze(), a.squeeze(2) + 2))
lam("squeeze_varargs", randn((1, 3, 1, 2)), lambda x: x.squeeze(0, 2))
lam("unbind", randn((3, 4)), lambda a: torch.unbind(a + 1) + torch.unbind(a, -1))
lam("split", randn((4, 6)), lambda a: (torch.split(a, 2, 1), torch.split(a, 3)))
lam("chunk", randn((6, 3)), lambda a: torch.chunk(a * 2, 3) + torch.chunk(a, 2, dim=1))
lam("narrow", randn((5, 6)), lambda a: (aten.narrow(a, 1, 2, 3), aten.narrow(a + 1, 0, 1, 2) + 2))
lam("select", randn((4, 5)), lambda a: (a.select(0, 1) + 1, a.select(1, -1)))
lam("diagonal", randn((4, 5)), lambda a: (a.diagonal(1), (a + 1).diagonal(-1) * 2))
lam("diagonal_copy", randn((2, 3)), lambda x: torch.diagonal_copy(x))
lam("transpose_contiguous", randn((3, 4)), lambda a: a.t().contiguous().view(-1))
lam("flip", randn((3, 4)), lambda a: (torch.flip(a, [0]), torch.flip(a + 1, [0, 1])))
lam("roll", randn((4, 5)), lambda a: (torch.roll(a, 2, 1), torch.roll(a, (1, -1), (0, 1))))
lam("repeat", randn((2, 3)), lambda a: (a.repeat(2, 2), (a + 1).repeat(1, 2, 1)))
lam("repeat_interleave", randn((2, 3)), lambda a: a.repeat_interleave(2, 0))
lam("movedim", randn((2, 3, 4)), lambda a: torch.movedim(a, 0, 2) * 2)
lam("unfold", randn((8,)), lambda a: a.unfold(0, 3, 2) + 1)
lam("mm_views", randn((6, 4), (4, 6)), lambda a, b: torch.mm(a.view(4, 6), b.view(6, 4)))
lam("slice1", randn((4, 6)), lambda a: (a[:, :2], a[:, 1:3] + 1, a[::2, 1:]))
lam("slice4", randn((4, 8)), lambda a: (a[:, 2:-2], a[1:-1, ::3] * 2))
lam("cat_of_views", randn((4, 4)), lambda a: torch.cat([a[:2], a.t()[2:], a[:, 1:3].t()], dim=0))
lam("cat_inplace", randn((3, 4), (3, 4)), lambda a, b: torch.cat([a, b]).mul_(2))


# -- indexing, index_put, scatter, gather --------------------------------------------

lam("index1", args(lambda: torch.randn(4, 5), lambda: torch.tensor([0, 2, 3])), lambda a, i: (a[i], a[:, i[:2]] + 1))
lam("index2", args(lambda: torch.randn(4, 5), lambda: torch.tensor([[0, 1], [2, 3]])), lambda a, i: aten.index(a, [i]))
lam(
    "index_select",
    args(lambda: torch.randn(5, 3), lambda: torch.tensor([4, 0, 0])),
    lambda a, i: (torch.index_select(a, 0, i), torch.index_select(a + 1, 1, i[:2])),
)
lam(
    "gather1",
    args(lambda: torch.randn(4, 5), lambda: torch.tensor([[0, 1], [2, 3], [4, 0], [1, 1]])),
    lambda a, i: (torch.gather(a, 1, i), torch.gather(a + 1, 1, i) * 2),
)
lam(
    "gather_scatter",
    args(lambda: torch.randn(6, 4), lambda: torch.randint(0, 6, (2, 12))),
    lambda f, e: torch.zeros_like(f).scatter_add_(0, e[1].unsqueeze(-1).expand(12, 4), f[e[0]] - f[e[1]] + 1),
)
lam(
    "index_put1",
    args(lambda: torch.randn(10, 3), lambda: torch.randperm(6), lambda: torch.randn(6, 3)),
    lambda a, b, c: (torch.index_put(a, [b], c), torch.index_put_(a + 1, [b + 1], c + 1) + 1),
)
lam(
    "index_put2",
    args(lambda: torch.randn(10, 3), lambda: torch.randint(0, 10, (15,)), lambda: torch.randn(15, 3)),
    lambda a, b, c: torch.index_put(a, [b], c, True),
)
lam(
    "index_put4",
    args(lambda: torch.rand(8, 2), lambda: torch.tensor([True, False] * 4), lambda: torch.rand([])),
    lambda a, b, c: torch.index_put(a, [b], c),
)
lam(
    "index_put_index",
    args(lambda: torch.tensor([1]), lambda: torch.randn(8, 4), lambda: torch.randn(4)),
    lambda i, x, s: aten.index.Tensor(aten.index_put.default(x, [i], s), [i]),
)
lam(
    "index_put_reinplace",
    args(lambda: torch.randn(16), lambda: torch.arange(5)),
    lambda x, i: x.index_put_((i,), torch.ones(5)).expand(2, 16),
)
lam(
    "index_put_failed_reinplace",
    args(lambda: torch.randn(16), lambda: torch.arange(5)),
    lambda x, i: (x, x.index_put((i,), torch.ones(5))),
)
lam(
    "index_put_as_masked_fill",
    args(lambda: torch.randn(4, 4), lambda: torch.randn(4, 4) > 0, lambda: torch.tensor(1.5)),
    lambda a, m, v: torch.index_put(a, [m], v),
)
lam(
    "unsafe_masked_index_put_accumulate",
    args(
        lambda: torch.randn(6),
        lambda: torch.tensor([True, False, True, True]),
        lambda: torch.tensor([0, 5, 2, 2]),
        lambda: torch.randn(4),
    ),
    lambda x, m, i, v: aten._unsafe_masked_index_put_accumulate(x, m, [i], v),
)
lam(
    "masked_fill",
    args(lambda: torch.randn(4, 4), lambda: torch.randn(4, 4) > 0),
    lambda a, m: (a.masked_fill(m, 2.0), (a + 1).masked_fill_(~m, -1.0)),
)
lam(
    "masked_scatter",
    args(lambda: torch.randn(5, 5), lambda: torch.arange(25).view(5, 5) % 3 == 0, lambda: torch.randn(9)),
    lambda v, m, s: torch.masked_scatter(v, m, s),
)
lam(
    "mutations_loop_fusion",
    args(
        lambda: torch.rand(1, dtype=torch.double), lambda: torch.tensor([0]), lambda: torch.rand(1, dtype=torch.double)
    ),
    lambda t, i, s: t.index_add(0, i, s, alpha=2.0) / 2,
)
lam(
    "index_add_",
    args(lambda: torch.randn(5, 3), lambda: torch.tensor([0, 4, 0]), lambda: torch.randn(3, 3)),
    lambda x, i, s: x.index_add_(0, i, s),
)
lam(
    "index_copy_",
    args(lambda: torch.randn(5, 3), lambda: torch.tensor([0, 4, 2]), lambda: torch.randn(3, 3)),
    lambda x, i, s: x.index_copy_(0, i, s) * 2,
)
lam(
    "index_fill_", args(lambda: torch.randn(5, 3), lambda: torch.tensor([1, 3])), lambda x, i: x.index_fill_(0, i, -2.0)
)
lam(
    "scatter1",
    args(lambda: torch.zeros(2, 3), lambda: torch.tensor([[0]]), lambda: torch.ones(1, 1)),
    lambda a, i, b: aten.scatter(a, -1, i, b),
)
lam(
    "scatter4",
    args(lambda: torch.randn(4, 3), lambda: torch.tensor([[0, 1], [2, 0], [1, 1], [0, 2]])),
    lambda x, i: aten.scatter(x, 1, i, 2.5),
)
lam(
    "scatter6",
    args(lambda: torch.randn(4, 3), lambda: torch.tensor([[0, 1], [2, 0], [1, 1], [0, 2]])),
    lambda x, i: x.scatter(1, i, 1.0, reduce="add"),
)
lam(
    "scatter_add1",
    args(lambda: torch.randn(2, 3), lambda: torch.tensor([[0, 1], [1, 0]]), lambda: torch.randn(2, 2)),
    lambda a, i, b: aten.scatter_add(a, 1, i, b),
)
lam(
    "scatter_add2",
    args(lambda: torch.randn(2, 3), lambda: torch.tensor([[0, 0, 1], [1, 1, 0]]), lambda: torch.randn(2, 3)),
    lambda a, i, b: aten.scatter_add(a, 0, i, b),
)
lam(
    "scatter_add_inplace_view",
    args(lambda: torch.randn(4, 3), lambda: torch.tensor([[0, 2, 1]]), lambda: torch.randn(1, 3)),
    lambda a, i, b: (a[1:].scatter_add_(0, i, b), a)[1],
)
lam(
    "scatter_reduce2",
    args(lambda: torch.randn(2, 3), lambda: torch.tensor([[0, 1, 0], [1, 0, 1]]), lambda: torch.randn(2, 3)),
    lambda a, i, b: (
        aten.scatter_reduce(a, 0, i, b, "sum", include_self=False),
        aten.scatter_reduce(a, 1, i, b, "amax"),
        aten.scatter_reduce(a, 1, i, b, "mean"),
    ),
)
lam(
    "scatter_reduce_",
    args(lambda: torch.randn(3, 5), lambda: torch.tensor([[0, 1], [1, 2], [4, 4]]), lambda: torch.randn(3, 2)),
    lambda x, i, s: x.scatter_reduce_(1, i, s, "amax"),
)
lam(
    "select_scatter",
    randn((4, 6, 3), (4, 3), (6, 3)),
    lambda x, a, b: (aten.select_scatter(x, a, 1, 0), aten.select_scatter(x, b, 0, 1)),
)
lam("slice_scatter", randn((4, 6), (4, 2)), lambda x, s: aten.slice_scatter(x, s, 1, 2, 4))
lam("slice_scatter2", randn((4, 6), (2, 6)), lambda x, s: aten.slice_scatter(x, s, 0, 0, 4, 2))
lam("slice_scatter3", randn((8, 4), (4, 4)), lambda x, s: aten.slice_scatter(x + 1, s, 0, 1, None, 2))
lam("slice_scatter5", randn((4, 4), (0, 4)), lambda x, s: aten.slice_scatter(x, s, 0, 2, 2))
lam("diagonal_scatter", randn((4, 4), (3,)), lambda x, s: aten.diagonal_scatter(x, s, 1))
lam(
    "as_strided_scatter_self_overlap_free",
    randn((4, 4), (2, 2)),
    lambda x, s: aten.as_strided_scatter(x * 1, s, (2, 2), (4, 1), 1),
)
lam(
    "setitem_tensor_index",
    args(lambda: torch.randn(5, 3), lambda: torch.randn(2, 3)),
    lambda x, v: (x.__setitem__(torch.tensor([1, 3]), v), x)[1],
)
lam("setitem_bool_mask", randn((4, 4)), lambda x: (lambda y: (y.__setitem__(y > 0, 0.0), y)[1])(x.clone()))
lam(
    "bucketize_like_searchsorted",
    args(lambda: torch.tensor([0.0, 1.0, 2.0, 3.0]), lambda: torch.randn(6) * 2),
    lambda b, x: torch.searchsorted(b, x),
)


# -- reductions, scans, sorting -------------------------------------------------------

lam("sum1", randn((8, 8), (8, 8)), lambda a, b: ((a + b).sum(-1),))
lam("sum4", randn((1, 4, 4, 4)), lambda a: (lambda b: (lambda c: (c + 3).sum(-1) + 5)(b.sum(-1)))(a + 1))
lam(
    "reduction1",
    args(lambda: torch.tensor([float("-inf"), 0.0, float("inf")])),
    lambda a: (a.sum(), a.max(), a.min(), a.argmax(), a.argmin()),
)
lam(
    "unroll_small_reduction",
    randn((8, 3)),
    lambda x: (
        *x.min(-1),
        *x.max(-1),
        x.sum(-1),
        (x > 1).any(-1),
        (x > 0).all(-1),
        x.argmin(-1),
        x.argmax(-1),
        x.amin(-1),
        x.amax(-1),
        x.aminmax(),
    ),
)
lam("expanded_reduction", randn((4, 1, 6), (1, 5, 6)), lambda x, y: (x * y).sum((0, 1)))
lam(
    "min_max_reduction",
    randn((4, 4), (4, 4)),
    lambda a, b: ((a + b).max(), (a + b).min(), torch.amax(a + 1, keepdim=True), torch.amin(b + 1, keepdim=True)),
)
lam("std", randn((4, 5)), lambda x: (torch.var(x, True), torch.var(x, False), torch.var(x, -1, True), torch.std(x, 0)))
lam("var_mean", randn((4, 5)), lambda x: (*torch.var_mean(x, -1), *torch.var_mean(x, 0, correction=0)))
lam("cumsum", randn((4, 6)), lambda x: (x.cumsum(0), x.cumsum(1), (x + 1).cumprod(1)))
lam("logcumsumexp", randn((4, 6)), lambda x: (x.logcumsumexp(0), x.logcumsumexp(1)))
lam("cummax", randn((4, 6)), lambda x: (*torch.cummax(x, 1), *torch.cummin(x, 0)))
lam("sort", randn((4, 6)), lambda x: torch.sort(x, dim=1))
lam("topk", randn((4, 6)), lambda x: torch.topk(x, 3, dim=1))
lam(
    "argmax_argmin_with_duplicates",
    args(lambda: torch.tensor([[1.0, 3.0, 3.0, 0.0], [2.0, 2.0, -1.0, -1.0]])),
    lambda x: (x.argmax(1), x.argmin(1), x.argmax(), x.argmin()),
)
lam("logsumexp", randn((4, 6)), lambda x: (torch.logsumexp(x, 1), torch.logsumexp(x * 10, 0)))
lam("softmax", randn((4, 6), (4, 6)), lambda a, b: (F.softmax(a + b, -1), F.softmax(a, 0), F.log_softmax(b, 1)))
lam("prod", randn((4, 5)), lambda a: (a.prod(0), a.prod(1), a.prod()))
lam("mean_keepdim", randn((4, 5, 6)), lambda a: (a.mean(dim=(0, 2), keepdim=True), a.mean()))
lam("norm", randn((4, 5)), lambda a: (torch.linalg.vector_norm(a, dim=1), a.norm(p=1), a.norm(dim=0)))


# -- neural-network ops ---------------------------------------------------------------

lam("layer_norm", randn((4, 6)), lambda x: F.layer_norm(x, (6,)))
lam("batch_norm_training", randn((4, 3, 2, 2)), lambda x: F.batch_norm(x, None, None, training=True))
lam("group_norm", randn((2, 4, 3)), lambda x: F.group_norm(x, 2))
lam("linear", randn((4, 6), (5, 6), (5,)), lambda x, w, b: F.linear(x, w, b))
lam(
    "bmm",
    randn((2, 3, 4), (2, 4, 5)),
    lambda a, b: (torch.bmm(a, b), torch.bmm(a.transpose(1, 2).contiguous().transpose(1, 2), b)),
)
lam("addmm", randn((5,), (4, 6), (6, 5)), lambda b, x, w: torch.addmm(b, x, w, beta=0.5, alpha=2.0))
lam("conv2d", randn((1, 3, 6, 6), (4, 3, 3, 3)), lambda x, w: F.conv2d(x, w, padding=1))
lam("avg_pool2d1", randn((1, 2, 6, 6)), lambda x: aten.avg_pool2d(x, [3, 3], [2, 2]))
lam("max_pool2d1", randn((1, 2, 6, 6)), lambda x: aten.max_pool2d_with_indices(x, [3, 3], [2, 2]))
lam("adaptive_avg_pool2d1", randn((1, 2, 7, 7)), lambda x: aten._adaptive_avg_pool2d(x, (3, 3)))
lam("upsample_nearest2d", randn((1, 2, 3, 3)), lambda x: F.interpolate(x, scale_factor=2, mode="nearest"))
lam("upsample_bilinear2d", randn((1, 2, 3, 3)), lambda x: F.interpolate(x, scale_factor=2, mode="bilinear"))
lam(
    "constant_pad_nd",
    randn((2, 3, 4)),
    lambda a: (aten.constant_pad_nd(a, [1, 1]), aten.constant_pad_nd(a, [0, 1, 2, 0], 3.5)),
)
lam(
    "reflection_pad2d",
    randn((1, 2, 4, 4)),
    lambda x: (aten.reflection_pad2d(x, [1, 1, 1, 1]), F.pad(x, (1, 2, 0, 1), "replicate")),
)
lam(
    "embedding",
    args(lambda: torch.randn(10, 3), lambda: torch.tensor([[1, 2, 4, 5], [4, 3, 2, 9]])),
    lambda w, i: F.embedding(i, w),
)
lam(
    "embedding_bag",
    args(lambda: torch.randn(10, 3), lambda: torch.tensor([1, 2, 4, 5, 4, 3, 2, 9]), lambda: torch.tensor([0, 4])),
    lambda w, i, o: F.embedding_bag(i, w, o),
)
lam(
    "nll_loss",
    args(lambda: torch.randn(4, 5).log_softmax(1), lambda: torch.tensor([0, 4, 2, 1])),
    lambda x, t: (F.nll_loss(x, t), F.nll_loss(x, t, reduction="none")),
)
lam(
    "cross_entropy_label_smoothing",
    args(lambda: torch.randn(4, 5), lambda: torch.tensor([0, 4, 2, 1])),
    lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1),
)
lam("gelu_tanh", randn((4, 4)), lambda x: (F.gelu(x, approximate="tanh"), F.gelu(x)))
lam("glu", randn((4, 6)), lambda x: F.glu(x, -1))
lam(
    "pixel_shuffle", randn((1, 8, 2, 2)), lambda x: (F.pixel_shuffle(x, 2), F.pixel_unshuffle(F.pixel_shuffle(x, 2), 2))
)
lam("tril_triu", randn((4, 4)), lambda x: (x.tril(), (x + 1).triu(1), torch.tril(x, -1)))
lam("clone_preserve_strides_input", args(lambda: torch.randn(6, 8)[:, ::2]), lambda x: (x.clone(), x + 1))
lam(
    "channels_last_input",
    args(lambda: torch.randn(1, 3, 4, 4).to(memory_format=torch.channels_last)),
    lambda x: (x * 2, x.sum(1), x.permute(0, 2, 3, 1)),
)
lam(
    "dtype_promotion",
    args(lambda: torch.randn(4), lambda: torch.arange(4)),
    lambda a, b: (a + b, b * 2.5, b // 3, a > b),
)
# (no arithmetic on float16 values: Inductor computes in float32 and elides the rounding of a cast
# round trip, unless emulate_precision_casts: up to 1 ulp of float16 from eager)
lam("to_dtype", randn((4, 4)), lambda x: (x.to(torch.float16), x.to(torch.int64), x.double() * 2))


# -- test_functionalization.py ---------------------------------------------------------


@program("index_put3", args(lambda: torch.randn(6, 4, 2), lambda: torch.arange(3), lambda: torch.randn(6, 1, 2)))
def _index_put3(a, b, c):
    aten.index_put_(a, (None, b, None), c)
    a1 = a + 1
    aten.index_put_(a1, (None, b + 1, None), c + 1)
    return a, a1


@program("functionalization_multiple_views_of_same_base", randn((4,)))
def _f_multiple_views(x):
    y, z = x.view(-1), x.view(-1)
    x.add_(1)
    return z + 1, y + 1


@program("functionalization_simple", randn((4, 2)))
def _f_simple(x):
    y = x.view(4, 2)
    y.add_(torch.ones(4, 2))
    return y, x * x


@program("functionalization_simple_out", randn((4, 2)))
def _f_simple_out(x):
    z = torch.empty(())
    torch.add(x.view(4, 2), torch.ones(4, 2), out=z)
    return z * z, z


@program("functionalization_multi_out", randn((8,)))
def _f_multi_out(x):
    out_min, out_max = torch.empty(4), torch.empty(4)
    torch.aminmax(x.view(2, 4), dim=0, out=(out_max, out_min))
    return out_max, out_min


@program("functionalization_tensor_ctr", randn((3,)))
def _f_tensor_ctr(x):
    y = torch.tensor((1.0, 2.0, 3.0))
    y.view(-1).add_(x)
    return y


@program("functionalization_inplace_on_non_view", randn((4, 2)))
def _f_inplace_on_non_view(x):
    y = x.view(4, 2)
    x.add_(torch.ones(4, 2))
    return y


@program("functionalization_as_strided", randn((9,)))
def _f_as_strided(x):
    x.as_strided((2,), (2,), 1).add_(1)
    return x


@program("functionalization_diagonal", randn((2, 2)))
def _f_diagonal(x):
    x.diagonal().add_(torch.ones(2))
    return x * x


@program("functionalization_split", randn((4, 2)))
def _f_split(x):
    _, y2 = x.split(2)
    y3 = y2.diagonal()
    y3.add_(torch.ones(2))
    return y3, x * x


@program("functionalization_view_inplace", randn((4, 2)))
def _f_view_inplace(x):
    x.transpose_(1, 0)
    x[0].add_(torch.ones(4))
    return x


@program("functionalization_optional_tensor_list", randn((4, 2)))
def _f_optional_tensor_list(x):
    y = x.view(8)
    y.index_put_((torch.arange(4),), torch.arange(4, dtype=y.dtype), accumulate=False)
    return y


@program("functionalization_scalars", randn((4, 2)))
def _f_scalars(x):
    y = x.view(4, 2)
    y.add_(1)
    z = 2 * y
    z.div_(1)
    return z


@program("functionalization_metadata_change", randn((4, 2)))
def _f_metadata_change(x):
    return x.ge_(0)


@program("functionalization_everything", randn((4, 2)))
def _f_everything(x):
    z0 = (x + x).view(8).reshape(2, 4)
    z1 = z0.transpose(1, 0)
    z1.unsqueeze_(0)
    z1.squeeze_()
    z2, _ = z1.split(2)
    z2.add_(torch.ones(2, 2))
    return z2, z0[0] + z2.reshape(4)


@program("functionalization_copy_broadcast", randn((1,)))
def _f_copy(x):
    tmp = torch.zeros(2, 2)
    y = tmp.diagonal().copy_(x)
    return y.add_(x), tmp


@program("functionalization_fill_", randn((2, 2)))
def _f_fill(x):
    y = x + x
    y.diagonal().fill_(0)
    return y


@program("functionalization_resize_smaller", randn((8, 2)))
def _f_resize_smaller(w):
    y = (w + 1).view(4, 4)
    y.resize_(3, 3)
    y.view(-1).add_(1)
    return y + 1


@program("functionalization_nested_functions_propagate_updates", randn((2, 2)))
def _f_nested(x):
    x[0].add_(1)
    return x + x


# -- more mutation through views (in the spirit of the functionalization tests) ----------


@program("view_clone_view_inplace", randn((2, 3)))
def _view_clone_view_inplace(x):
    y = x.view(-1).clone()
    y.view(2, 3).add_(1)
    return y, x


@program("unbind_mutate", randn((3, 4)))
def _unbind_mutate(x):
    a, b, c = x.unbind(0)
    b.mul_(3)
    return a + c, x


@program("chunk_inplace", randn((6,)))
def _chunk_inplace(x):
    for i, p in enumerate(x.chunk(3)):
        p.mul_(i + 1)
    return x


@program("squeeze_unsqueeze_inplace_input", randn((1, 3, 1)))
def _squeeze_inplace(x):
    x.squeeze_(0)
    x.unsqueeze_(0)
    x.squeeze_(2)
    return x * 2, x


@program("as_strided_inplace_input", randn((4, 4)))
def _as_strided_(x):
    x.as_strided_((2, 2), (4, 1), 1)
    x.add_(1)
    return x


@program("unfold_mutate", randn((8,)))
def _unfold_mutate(x):
    y = x.clone()
    u = y.unfold(0, 2, 2)
    u[:, 0].zero_()
    return y, u


@program("view_of_view_mutated_twice", randn((2, 6)))
def _view_of_view(x):
    a = x.view(3, 4)
    a[1:].add_(1)
    x.view(12)[::3].mul_(2)
    return a


@program("real_view_of_complex_mutated", randn((3, 2)))
def _real_view_complex(x):
    c = torch.view_as_complex(x.clone())
    r = torch.view_as_real(c)
    r.add_(1)
    return c.abs(), r


@program("index_put_accumulate_through_t", randn((5, 3)))
def _index_put_t(x):
    x.t().index_put_((torch.tensor([0, 0, 2]),), torch.ones(3, 5), accumulate=True)
    return x


@program("inplace_on_two_views_of_input", randn((3, 3)))
def _two_views(x):
    y, z = x[0], x[:, 0]
    y.add_(1)
    return z, y


@program("out_variant_then_view", randn((4,)))
def _out_then_view(x):
    out = torch.empty(2, 2)
    torch.mul(x.view(2, 2), 2, out=out)
    return out.t(), out


@program("detach_view_mutation", randn((3,)))
def _detach_view_mutation(x):
    y = x * 2
    y.detach().add_(1)
    return y


@program("no_grad_inplace_intermediate", randn((3,)))
def _no_grad_inplace(x):
    y = x * 2
    with torch.no_grad():
        y.mul_(3)
    return y + x


# -- reductions of bugs found (strict xfails in test_torchinductor_programs.py) -----------


@program("regression_addcmul_inplace_value", randn((3, 4), (3, 4)))
def _addcmul_inplace_value(x, y):
    # dynamo rewrites addcmul_ / addcdiv_ with value= into prims.fma + copy_ (bug A)
    x.addcmul_(y, y, value=0.5)
    return x


@program("regression_addcdiv_inplace_value", randn((3, 4), (3, 4)))
def _addcdiv_inplace_value(x, y):
    x.addcdiv_(y, y.abs() + 1, value=2.0)
    return x


@program("regression_exact_stride", args(lambda: torch.as_strided(torch.randn(8, 8), (8, 4), (8, 1))))
def _exact_stride(x):
    # test_torchinductor.py's test_exact_stride: a gapped output buffer (bug C)
    r = torch.empty_strided(x.size(), x.stride())
    r[:] = x + x
    return r


# -- running one program ----------------------------------------------------------------


def with_grad(values: list[Any]) -> list[Any] | None:
    """Floating-point tensors as non-leaves requiring grad, with the original's
    size, strides and offset and storage sharing; None if there are none."""
    roots: dict[int, torch.Tensor] = {}
    out: list[Any] = []
    for v in values:
        if not (isinstance(v, torch.Tensor) and v.is_floating_point() and v.layout is torch.strided):
            out.append(v)
            continue
        key = v.untyped_storage()._cdata
        if key not in roots:
            n = v.untyped_storage().nbytes() // v.element_size()
            flat = torch.empty(0, dtype=v.dtype).set_(v.untyped_storage(), 0, (n,), (1,)).clone()
            roots[key] = flat.requires_grad_(True).mul(1)
        root = roots[key]
        if v.is_contiguous() and v.storage_offset() == 0 and v.numel() == root.numel():
            out.append(root.view(v.shape))
        else:
            out.append(root.as_strided(v.size(), v.stride(), v.storage_offset()))
    return out if len(roots) else None


def compiler(entry: str, backend: str) -> Callable[[Callable[..., Any]], Any]:
    """``conveyor.compile`` (``entry="conveyor"``) or ``torch.compile(backend="conveyor")``
    (``"dynamo"``, after ``torch._dynamo.reset()``: past dynamo's recompile limit
    the rest of a sweep would run eagerly without a word)."""
    if entry == "conveyor":
        return lambda f: conveyor.compile(f, backend=backend)

    def dynamo(f: Callable[..., Any]) -> Any:
        torch._dynamo.reset()
        if backend == "eager":
            return torch.compile(f, backend="conveyor")
        return torch.compile(f, backend="conveyor", options={"backend": backend})

    return dynamo


#: (atol, rtol) by backend: Inductor reassociates floating-point work
TOLERANCE = {"eager": (1e-5, 1.3e-5), "inductor": (1e-4, 1e-4)}


def run(name: str, entry: str, backend: str, grad: bool) -> None:
    """Check program ``name`` against eager (``AssertionError`` on a difference)."""
    fn, make = PROGRAMS[name]
    torch.manual_seed(0)
    values = make()
    if grad:
        made = with_grad(values)
        assert made is not None, f"{name} has no floating-point input"
        values = made
    atol, rtol = TOLERANCE[backend]
    check(fn, *values, compile=compiler(entry, backend), atol=atol, rtol=rtol)


def has_float_input(name: str) -> bool:
    torch.manual_seed(0)
    return with_grad(PROGRAMS[name][1]()) is not None


# -- from test/dynamo/test_functions.py (strict xfails on the conveyor.compile entry) ---------


@program("functions_tensor_new_with_size", randn((10,)))
def _tensor_new_with_size(x):
    # test_tensor_new_with_size: Tensor.new(torch.Size) makes a tensor of that shape (bug E1)
    return x.new(torch.Size([2, 3])).fill_(2.0) + x.sum()


@program("functions_type_check", randn((10,)))
def _type_check(x):
    # test_fstrings3 reads x.__class__.__name__ (bug E2)
    return x + 1 if type(x) is torch.Tensor else x - 1


@program("functions_is_fx_tracing", randn((10,), (10,)))
def _is_fx_tracing(x, y):
    # test_is_fx_tracing (bug E3)
    return x - 1 if torch.fx._symbolic_trace.is_fx_tracing() else y + 1


# -- from test/dynamo/test_repros.py (strict xfails on the conveyor.compile entry) ----------


class _DeepcopiesSubmodule(torch.nn.Module):
    """test_maml_item_capture's PartialMaml fine-tunes ``deepcopy(self.net)`` in ``forward``."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import copy

        return copy.deepcopy(self.lin)(x)


PROGRAMS["repros_deepcopy_submodule_in_forward"] = (_DeepcopiesSubmodule(), randn((2, 3)))


@program("repros_numpy_in_program", randn((3,)))
def _numpy_in_program(x):
    # test_indexing_with_list reads tensor.numpy() inside the program (bug F)
    return x * float(x.numpy().sum())
