"""``CPUReproTests`` programs, third part: views and transposes feeding reductions,
softmax / layer-norm / group-norm chains, attention, randomness under a seed the
program sets, data-dependent scalars, errors eager raises too. Registered in
:data:`cpu_repro_programs.PROGRAMS`."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from cpu_repro_programs import args, lam, module, randn
from torch import nn

aten = torch.ops.aten
f16, bf16, f32 = torch.float16, torch.bfloat16, torch.float32

# -- transposes, strides, views -----------------------------------------------------------


def _channel_shuffle(x, groups):
    b, c, h, w = x.size()
    x = x.view(b, groups, c // groups, h, w).transpose(1, 2).contiguous().view(b, -1, h, w)
    return x.contiguous(memory_format=torch.channels_last)


lam("channel_shuffle_cl_output", args(lambda: torch.randn(2, 8, 4, 4), lambda: 2), _channel_shuffle)
for _shape in ((7, 7), (17, 17)):
    for _dt in (f32, bf16):
        lam(f"transpose_copy_{_shape[0]}_{str(_dt)[6:]}", randn(_shape, dtype=_dt), lambda a: a.t().contiguous())
lam("for_loop_collapsed", randn((199, 2)), lambda x: x.transpose(1, 0).contiguous())


def _halo(a):
    s = aten.as_strided.default(a, [1, 384, 2, 20, 12], [153600, 1, 61440, 384, 7680])
    s = aten.as_strided.default(s, [1, 384, 2, 2, 12, 12], [153600, 1, 61440, 3072, 7680, 384])
    v = aten._unsafe_view.default(s.clone(memory_format=torch.contiguous_format), [8, 48, 4, 144])
    first = aten.split_with_sizes.default(v.permute(0, 2, 3, 1), [16, 32], -1)[0]
    return first.permute(0, 1, 3, 2).expand(8, 4, 16, 144).clone(memory_format=torch.contiguous_format)


lam("transpose_non_contiguous", args(lambda: torch.randn(1, 384, 20, 20).to(memory_format=torch.channels_last)), _halo)
lam(
    "non_contiguous_index_with_constant_stride",
    randn((1, 4, 4, 8)),
    lambda x: torch.stack((-x[:, :, :, 1::2], x[:, :, :, ::2]), dim=-1).flatten(-2),
)
lam("vertical_sum_cpu_only", randn((16, 16)), lambda a: a.sum(dim=0))
lam("vertical_sum_cpu_only_3d", randn((8, 8, 8)), lambda a: a.sum(dim=1))
lam("transpose_vertical_sum_cpu_only", args(lambda: torch.randn(8, 6, 6), lambda: torch.randn(8, 6, 6).transpose(1, 2)), lambda a, b: (a * b).sum(dim=1))
lam("transpose_sum2d_cpu_only", args(lambda: torch.randn(10, 10), lambda: torch.randn(10, 10).t()), lambda a, b: (a * b).sum())
lam("transpose_sum_outer", randn((2, 5, 6, 6)), lambda a: a.transpose(2, 3).sum(dim=1).contiguous())
for _n in (8, 35):
    lam(f"argmax_argmin_cpptile2d_2d_input_{_n}", args(lambda n=_n: torch.randn(n, n).t(), lambda n=_n: torch.randn(n, n)), lambda a, b: ((a + b).max(dim=1), (a + b).min(dim=1)))
lam(
    "argmax_argmin_cpptile2d_3d_input",
    args(lambda: torch.randn(4, 16, 16).permute(0, 2, 1), lambda: torch.randn(4, 16, 16)),
    lambda a, b: ((a + b).max(dim=2), (a + b).min(dim=2)),
)


def _transpose_argmax(x):
    x = x.clone()
    x.sin_()
    return x.t().argmax()


lam("argmax_argmin_transpose_logical_index_cpu", randn((5, 7)), _transpose_argmax)
lam(
    "argmax_argmin_transpose_logical_index_cpu2",
    args(lambda: torch.arange(24, dtype=f32).reshape(6, 4).index_put((torch.tensor([4, 1]), torch.tensor([0, 3])), torch.tensor([-100.0, 100.0]))),
    lambda x: (x.t().argmin(), x.t().argmax()),
)
for _i, _vals in enumerate([[-755832.1250, 100], [100, 200, -755832.1250]]):
    lam(
        f"argmax_argmin_with_nan_value_{_i}",
        args(lambda v=_vals: torch.log1p(torch.tensor(v).repeat(16, 16))),
        lambda x: (torch.argmax(x), torch.argmin(x)),
    )
for _dt in (f32, bf16):
    lam(f"argmin_{str(_dt)[6:]}", randn((10, 10), dtype=_dt), lambda x: (torch.argmin(x, -1), torch.argmax(x, -1)))
    lam(
        f"sign_cpu_only_{str(_dt)[6:]}",
        args(lambda dt=_dt: torch.randn(2, 9, dtype=dt).index_fill(1, torch.tensor([0, 8]), math.nan)),
        torch.sign,
    )


def _sebotnet(x):
    y = F.pad(x, (0, 3)).reshape(-1, 5, 7)
    y = y[:, :4, 3:].reshape(4, 4, 1, 4, 4).expand(-1, -1, 4, -1, -1)
    return y.permute(0, 3, 1, 4, 2).clone(memory_format=torch.contiguous_format).view(4, 16, 16).softmax(dim=-1)


lam("expr_vec_non_contiguous", randn((16, 32)), _sebotnet)


class _Swin(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(32)

    def forward(self, x):
        b, h, w, c = x.shape
        return self.norm(x.reshape(b, h // 2, 2, w // 2, 2, c).permute(0, 1, 3, 4, 2, 5).flatten(3))


module("vec_contiguous_ModularIndexing", randn((1, 4, 4, 8)))(_Swin)


def _eliminate_copy(x1, x2):
    view = x2.permute(0, 2, 1, 3).clone(memory_format=torch.contiguous_format).view(8, -1, 32)
    return torch.bmm(view, x1), view.permute(0, 2, 1)


lam(
    "eliminate_meaningless_copy",
    args(lambda: torch.randn(8, 8, 32).transpose(1, 2), lambda: torch.randn(4, 8, 2, 32)),
    _eliminate_copy,
)
lam(
    "relu_permute_reshape_reinterpret_view",
    args(lambda: torch.randn(2, 8, 4, 4).to(memory_format=torch.channels_last)),
    lambda x: torch.relu(x).permute(0, 2, 3, 1).reshape(2, 16, 8),
)


def _tiling_index_expr(x, y):
    x = x.view(2, 2, 2, 9).permute(0, 1, 3, 2)
    return aten.constant_pad_nd.default(y * x, [0, 0, 1, 0, 0, 0], 0.0)


lam("select_tiliing_with_index_expr", randn((2, 4, 3, 3), (2, 2, 9, 2)), _tiling_index_expr)
lam("inductor_dynamic_shapes_broadcasting", randn((4,), (8,)), lambda x, y: x.view(-1, 4) * y.view(-1, 4))
lam("mutation_transpose_reshape_ordering", args(lambda: torch.ones(1, 2, 3).transpose(1, 2), lambda: torch.randn(1, 3, 1)), lambda x, y: x.add_(y).reshape(-1, 1, 3))
lam(
    "indirect_index_transposed_tensor",
    args(lambda: torch.randn(16, 2, 16).permute(2, 1, 0), lambda: torch.randint(0, 2, (16,))),
    lambda buf, idx: buf[torch.arange(buf.shape[0]), idx, :],
)


def _indirect_tail(positions, cache):
    x = cache[positions]
    y = x[0].clone()
    y[..., 1::3] = x[1, ..., 1::3]
    y[..., 2::3] = x[2, ..., 2::3]
    return y


lam(
    "indirect_assert_scalar_mask_tail_vec_no_crash",
    args(lambda: torch.zeros(3, 2, dtype=torch.int64), lambda: torch.arange(3, dtype=f32).reshape(1, 3)),
    _indirect_tail,
)


def _constant_store(a):
    a[0, [3, 3]] = -float("inf")
    return a


lam("constant_store", args(lambda: torch.rand(4, 5)), _constant_store)
lam(
    "to_dtype_bool_float",
    args(lambda: torch.ones(16)),
    lambda a: torch.where(torch.ones_like(a).to(torch.bool), torch.zeros_like(a), torch.ones_like(a) * 2),
)
lam("to_dtype_float_bool", args(lambda: torch.rand(16)), lambda a: a * torch.tensor(a >= 0, dtype=f32))
lam("issue122380", randn((2, 3, 4)), lambda x: torch.tanh(torch.stack(torch.unbind(x), dim=1)))
lam("ir_node_str", randn((8, 16)), lambda x: (x.sin(), nn.Softmax(dim=1)(x.cos())))
lam("pdist_fallback_continuous", randn((2, 2)), lambda x: F.pdist(x.permute(1, 0)))
lam("sin_atan_nan", args(lambda: torch.tensor([float("nan")])), lambda x: torch.sin(torch.atan(x)))
for _e in (-math.inf, math.inf, math.nan):
    lam(f"special_float_pow_{_e}", args(lambda: torch.randn(10), lambda e=_e: e), aten.pow)

# -- reductions, softmax, norms -------------------------------------------------------------

lam("outer_loop_fusion", randn((2, 3, 9, 17)), lambda x: x - torch.amax(x, dim=-1, keepdim=True))
lam("outer_loop_fusion_buffer_remove", randn((8, 8, 2)), lambda x: torch.softmax(x.sum(dim=-1), -1))
lam("softmax_with_zero_dim", args(lambda: torch.rand([], dtype=bf16)), lambda x: torch.softmax(x, 0))
lam("local_buffer_in_outer_loop_fusion", randn((2, 3, 9, 17)), lambda x: x - F.softmax(x, dim=-1))
lam("share_local_buffers_in_outer_loop_fusion", randn((2, 3, 9, 17)), lambda x: x - F.softmax(F.softmax(x, dim=-1), dim=-1))


def _two_local_buffers(x):
    s = torch.sum(F.softmax(x, dim=-1), dim=-1)
    e = torch.exp(torch.broadcast_to(s.unsqueeze(-1), [*(s.size()[0:3]), 16]))
    return x[:, :, :, 0:16] - (e - torch.sum(e, dim=-1).unsqueeze(-1))


def _two_local_buffers2(x):
    exp = torch.exp(x - torch.amax(x, -1, keepdim=True))
    exp2 = torch.exp(exp - torch.sum(exp, -1, keepdim=True))
    return exp - (exp2 - torch.sum(exp2, -1, keepdim=True))


def _line_reuse(x, y):
    z = torch.matmul(x, y)
    exp = torch.exp((z - torch.amax(x, -1, keepdim=True)) / z)
    return exp - torch.sum(exp, -1, keepdim=True)


lam("two_local_buffers_in_outer_loop_fusion", randn((2, 3, 5, 20)), _two_local_buffers)
lam("two_local_buffers_in_outer_loop_fusion_case2", randn((2, 3, 9, 17)), _two_local_buffers2)
lam("local_buffer_with_line_reuse", args(lambda: torch.rand(4, 32), lambda: torch.rand(32, 32)), _line_reuse)


def _tiled_outer(l_c, y, alpha, beta):
    x = l_c[..., 16]
    positive = F.softplus(x) + 0.0001
    gammaln_term = torch.special.gammaln(positive + alpha.view(1, -1))
    erf_term = torch.special.erf(x * beta.view(1, -1))
    logadd = torch.logaddexp(gammaln_term, torch.special.xlogy(positive, F.softplus(y) + 0.0001))
    centered = logadd - logadd.mean(dim=-1, keepdim=True)
    return torch.stack([centered, erf_term, centered * erf_term], dim=-1)


lam(
    "outer_loop_local_buffer_with_tiled_outer_dim",
    args(lambda: torch.randn(4, 8, 64) * 0.1, lambda: torch.randn(4, 8) * 0.1, lambda: torch.randn(8) * 0.1, lambda: torch.zeros(8)),
    _tiled_outer,
)


def _outer_einsum(xs, ls):
    temp = torch.exp(-torch.einsum("i...,i->i...", xs, ls))
    return torch.einsum("i,i...->i...", 1 / torch.einsum("i...->i", temp), temp)


lam("outer_looop_fusion_with_local_buf", args(lambda: torch.ones(5, 1, 8, 8), lambda: torch.ones(5)), _outer_einsum)
lam("large_mean", args(lambda: torch.rand(300, 1000)), torch.mean)
lam("outer_mean_large_size", randn((2, 2, 8, 8)), lambda x: torch.mean(torch.outer(x.flatten(), torch.ones_like(x.flatten())), dim=1))
for _mean, _std in [(0, 1), (1e4, 10), (0, 1e10)]:
    module(
        f"two_step_variance_{_mean:g}_{_std:g}",
        args(lambda m=_mean, s=_std: (lambda x: (x - x.mean(1, keepdim=True)) / (x.std(1, keepdim=True) + 1e-5) * s + m)(torch.randn(8, 256))),
        tol=(1.0, 1e-4) if max(_mean, _std) > 100 else None,
    )(lambda: nn.LayerNorm(256).eval())
for _dt in (f32, bf16):
    lam(
        f"new_vec_op_cpu_only_{str(_dt)[6:]}",
        args(lambda dt=_dt: torch.randn(2, 9, dtype=dt).index_fill(1, torch.tensor([0]), math.nan)),
        lambda x: (torch.log1p(torch.expm1(torch.erf(x))), torch.sin(torch.cos(torch.erf(x)))),
    )
lam(
    "_adaptive_avg_pool2d_up",
    args(lambda: torch.randn(2, 3, 16, 16).to(memory_format=torch.channels_last)),
    lambda x: torch._adaptive_avg_pool2d(x, (65, 16)),
)
lam(
    "_adaptive_avg_pool2d_down",
    args(lambda: torch.randn(2, 3, 65, 65).to(memory_format=torch.channels_last)),
    lambda x: torch._adaptive_avg_pool2d(x, (16, 16)),
)
lam("reduction_with_dynamic_threads", args(lambda: torch.randn(1000), lambda: torch.rand(1000)), lambda a, b: (a.sum(), b.sum()))
lam("repeated_exp", randn((16, 16)), lambda x: (lambda y: (y + 1, y.sum(-1)))(x.sigmoid()))
lam("vector_norm_compile", randn((16, 32)), lambda x: torch.linalg.vector_norm(x, ord=2, dim=[], keepdim=False, dtype=None))
lam(
    "lp_pool_inf_norm_type_compile",
    args(lambda: torch.tensor([[[1.0, -3.0, 2.0, 4.0]]]), lambda: torch.randn(1, 1, 3, 3), lambda: torch.randn(1, 1, 2, 2, 3)),
    lambda x1, x2, x3: tuple(
        f(x, s * float("inf"), 2, 1) for f, x in ((F.lp_pool1d, x1), (F.lp_pool2d, x2), (F.lp_pool3d, x3)) for s in (1, -1)
    ),
)
for _fmt in (torch.contiguous_format, torch.channels_last):
    for _dt in (f32, bf16):
        module(
            f"group_norm_vec_{'cl' if _fmt == torch.channels_last else 'contig'}_{str(_dt)[6:]}",
            args(lambda fmt=_fmt, dt=_dt: torch.randn(2, 12, 6, 6, dtype=dt).to(memory_format=fmt)),
        )(lambda dt=_dt: nn.GroupNorm(3, 12).to(dt).eval())
module("group_norm_large_input", args(lambda: torch.randn(1, 8, 10, 10).to(memory_format=torch.channels_last)))(lambda: nn.GroupNorm(2, 8).eval())


class _NormSumConv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.norm, self.conv1, self.conv2 = nn.GroupNorm(1, 9).eval(), nn.Conv1d(9, 1, 3), nn.Conv1d(1, 7, 3)

    def forward(self, x):
        return self.conv2(self.conv1(self.norm(x).sum(dim=3)))


module("group_norm_sum_conv1d_tail_reduction_store", randn((2, 9, 6, 5)))(_NormSumConv)
lam(
    "group_norm_backward_symint_divisible_channels",
    args(lambda: torch.rand(2, 33, 4, 5), lambda: torch.rand(33), lambda: torch.rand(33)),
    lambda x, w, b: torch.sigmoid(F.group_norm(x, 1, weight=w, bias=b).max(dim=0).values),
)


class _NormsGrad(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.pool, self.ln = nn.AvgPool2d(2), nn.LayerNorm([5])
        self.bn, self.gn = nn.BatchNorm2d(12).eval(), nn.GroupNorm(12, 12).eval()

    def loss(self, x):
        return self.gn(self.bn(self.ln(self.pool(x)))).abs().mean()

    def forward(self, x):
        return torch.func.grad(self.loss)(x)


module("group_norm_torch_func_grad_dynamic", randn((2, 12, 10, 10)))(_NormsGrad)
for _dt in (f16, bf16):
    module(
        f"layernorm_nan_with_inf_cpu_{str(_dt)[6:]}",
        args(lambda dt=_dt: torch.tensor([[65504.0, 65504.0, -65504.0, -65504.0]]).to(dt)),
    )(lambda dt=_dt: nn.LayerNorm(4).to(dt).eval())
module("maxpool2d_cpu_only", args(lambda: torch.randn(2, 4, 12, 12).to(memory_format=torch.channels_last)))(lambda: nn.MaxPool2d(3, 2, 1))
module("maxpool2d_cpu_only_bf16", args(lambda: torch.randn(2, 4, 12, 12, dtype=bf16).to(memory_format=torch.channels_last)))(lambda: nn.MaxPool2d(3, 2, 1))
lam(
    "maxpool2d_with_pre_loop_collapse_cpu_only",
    args(*[lambda: torch.randn(2, 3, 20, 20).to(memory_format=torch.channels_last)] * 2),
    lambda x1, x2: nn.MaxPool2d(kernel_size=3, stride=2, ceil_mode=True)(x1 + x2),
)


def _vertical_tail(x, y, z, residual, weight, bias):
    x = F.leaky_relu(x * y + z).permute(1, 0).unsqueeze(1)
    return F.layer_norm(x + residual, (14,), weight, bias)


lam("vertical_reduction_tail_store_uses_tail_width", randn((14, 2), (14, 2), (14, 2), (2, 2, 14), (14,), (14,)), _vertical_tail)
lam(
    "fractional_max_pool2d_3d_input",
    randn((3, 16, 16), (1, 3, 2)),
    lambda x, samples: F.fractional_max_pool2d(x, kernel_size=3, output_size=(4, 4), _random_samples=samples.abs() % 1),
)
