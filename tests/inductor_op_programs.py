"""Programs from PyTorch's ``test/inductor/test_torchinductor.py`` (``CommonTemplate``):
reductions, scans, sorting and neural-network ops. Registered in
:data:`program_registry.PROGRAMS`; run by :mod:`torchinductor_programs`."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from program_registry import args, lam, randn

aten = torch.ops.aten

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
