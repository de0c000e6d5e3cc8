"""Programs from PyTorch's ``test/inductor/test_torchinductor.py`` (``CommonTemplate``:
each ``self.common(fn, args)``; the name is the test's without ``test_``, a suffix
numbers a test's further programs): in-place ops, views, indexing and scatter.
Registered in :data:`program_registry.PROGRAMS`; run by :mod:`torchinductor_programs`."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from program_registry import args, lam, program, randn

aten = torch.ops.aten

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
