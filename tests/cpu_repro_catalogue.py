"""``CPUReproTests`` programs, first part: convolutions, linear and LSTM modules,
modules that change their own weights, NaN / inf / large values, randomness. Names are the upstream test's without
``test_``; a suffix tells a test's further programs apart. Registered in
:data:`cpu_repro_programs.PROGRAMS`."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from cpu_repro_programs import args, lam, module, randn
from torch import nn

aten = torch.ops.aten
f16, bf16 = torch.float16, torch.bfloat16

# -- convolutions and linear layers ---------------------------------------------------

lam("torch_linalg_qr_tuple_slice", randn((4, 4)), lambda x: torch.linalg.qr(x)[:1])
lam(
    "conv_bias_flattened_view",
    args(lambda: torch.ones(1, 1, 1, 1)),
    lambda x: F.conv2d(x, x, x.to(torch.bool).float().flatten(), stride=1, padding=0),
)


class _ConvBn(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1, bias=False, dtype=bf16)
        self.bn = nn.BatchNorm2d(4, eps=0.001)

    def forward(self, x):
        return self.bn(self.conv(x))


module("conv2d_bn_mixed_dtype", randn((1, 3, 8, 8), dtype=bf16))(lambda: _ConvBn().eval())


def _cholesky(inp):
    eye = torch.eye(4, dtype=inp.dtype).unsqueeze(0).expand(inp.shape[0], 4, 4).contiguous()
    return torch.linalg.cholesky(eye + 0.5 * (inp @ inp.mH), upper=True).abs().sum()


lam("complex_cholesky_mh_view_fallback", args(lambda: torch.randn(2, 4, 4, dtype=torch.complex64)), _cholesky)
module("nn_fold", randn((1, 16, 25)))(lambda: nn.Fold(output_size=(8, 8), kernel_size=(4, 4), stride=(1, 1)))
module("nn_fold_stride2", randn((1, 16, 9)))(lambda: nn.Fold(output_size=(8, 8), kernel_size=(4, 4), stride=(2, 2)))


class _ConvAutocast(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, 3)

    def forward(self, x):
        with torch.autocast("cpu"):
            return self.conv(x)


module("conv2d_autocast", randn((1, 3, 10, 7)), tol=(2e-2, 2e-2))(lambda: _ConvAutocast().eval())
lam(
    "conv1d_strided_weight_torch_compile",
    randn((2, 3, 5), (4, 2, 3)),
    lambda x, w: F.conv1d(x, w.transpose(2, 1)).clone(),
)


def _conv_transpose_softmax() -> nn.Module:
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.bn, self.convt, self.pool = nn.BatchNorm2d(5).eval(), nn.ConvTranspose2d(5, 2, 3), nn.MaxPool2d(2)

        def loss(self, x):
            return torch.softmax(self.pool(self.convt(self.bn(x))), dim=0).mean()

        def forward(self, x):
            return torch.func.grad(self.loss)(x)

    return M()


module("compile_dynamic_grad_conv_transpose2d", randn((3, 5, 6, 7)))(_conv_transpose_softmax)
module("mkl_linear", randn((2, 3, 10)))(lambda: nn.Sequential(nn.Linear(10, 2)).eval())
module("mkl_linear_no_bias", randn((2, 3, 10)))(lambda: nn.Sequential(nn.Linear(10, 2, bias=False)).eval())


class _TwiceConv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 3, (3, 3))

    def forward(self, x):
        return self.conv(F.relu(self.conv(x)))


class _TwiceLinear(nn.Module):
    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 16, dtype=dtype)

    def forward(self, x):
        return self.linear(F.relu(self.linear(x)))


module("conv_used_from_multiple_places", randn((1, 3, 12, 12)))(lambda: _TwiceConv().eval())
module("linear_used_from_multiple_places_bf16", randn((8, 16), dtype=bf16))(lambda: _TwiceLinear(bf16).eval())
module("linear_used_from_multiple_places_fp16", randn((8, 16), dtype=f16))(lambda: _TwiceLinear(f16).eval())

lam(
    "multihead_attention_cpu",
    args(
        *[lambda: torch.randn(1, 3, 6)] * 3,
        lambda: 6,
        lambda: 2,
        lambda: torch.randn(18, 6),
        lambda: torch.randn(18),
        lambda: torch.randn(18, 6),
        lambda: torch.randn(18),
        lambda: None,
        lambda: False,
    ),
    torch._native_multi_head_attention,
)


class _BufferRows(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.foo = nn.Buffer(torch.rand(3, 10))

    def forward(self, x):
        lx = [x, x.clone(), x.clone()]
        return torch.cat([lx[i] + self.foo[i] for i in range(3)], 1)


module("module_buffer_mutation", args(lambda: torch.rand(1, 10)))(_BufferRows)
for _shape, _out, _bias in [((2, 3, 10), 3, True), ((10,), 3, False), ((2, 0), 3, True), ((2, 10), 0, True)]:
    _name = "linear_packed_bf16_" + "x".join(map(str, _shape)) + f"_{_out}{'' if _bias else '_nobias'}"
    module(_name, randn(_shape, dtype=bf16))(
        lambda s=_shape, o=_out, b=_bias: nn.Sequential(nn.Linear(s[-1], o, bias=b)).to(bf16).eval()
    )
module("linear_packed_fp16", randn((2, 3, 10), dtype=f16))(lambda: nn.Sequential(nn.Linear(10, 3)).to(f16).eval())
module("conv_transpose2d_packed_cpu", randn((1, 3, 6, 6)))(lambda: nn.ConvTranspose2d(3, 8, 3, 3, padding=0).eval())
module("conv_transpose2d_packed_cpu_unbatched", randn((3, 6, 6)))(
    lambda: nn.ConvTranspose2d(3, 8, 3, 3, padding=(0,)).eval()
)


def _full_boolean(n):
    x = torch.full((8,), n >= 8)
    return x, x + 1


lam("full_boolean_dynamic_shape", args(lambda: 8), _full_boolean)
lam("full_boolean_dynamic_shape_false", args(lambda: 7), _full_boolean)
module("conv_in_channel_1_dynamic_shapes", randn((2, 1, 7, 7)))(
    lambda: nn.Sequential(nn.Conv2d(1, 3, 3), nn.ReLU()).eval()
)

# -- LSTM ----------------------------------------------------------------------------


class _Lstm(nn.Module):
    def __init__(self, layers: int, bias: bool, bidirectional: bool, batch_first: bool) -> None:
        super().__init__()
        self.lstm = nn.LSTM(4, 5, layers, bias=bias, bidirectional=bidirectional, batch_first=batch_first)

    def forward(self, x, h=None, c=None):
        return self.lstm(x, None if h is None else (h, c))


module("lstm_packed", randn((3, 2, 4), (4, 2, 5), (4, 2, 5)))(lambda: _Lstm(2, True, True, False).eval())
module("lstm_packed_unbatched_empty_state", randn((3, 4)))(lambda: _Lstm(1, True, False, False).eval())
module("lstm_packed_batch_first_no_bias", randn((2, 3, 4), (1, 2, 5), (1, 2, 5)))(
    lambda: _Lstm(1, False, False, True).eval()
)


def _packed_input():
    sent = torch.randn(4, 6, 4)
    lens = torch.tensor([1, 6, 3, 2])
    packed = nn.utils.rnn.pack_padded_sequence(sent, lens, batch_first=True, enforce_sorted=False)
    return [packed, torch.rand(2, 4, 5), torch.randn(2, 4, 5)]


module("pack_padded_sequence_lstm", _packed_input)(lambda: _Lstm(1, True, True, True).eval())

# -- modules that change their own weights --------------------------------------------


class _MaskedConv(nn.Conv2d):
    def __init__(self) -> None:
        super().__init__(4, 8, 3, padding=1)
        mask = torch.zeros_like(self.weight)
        mask[:, :, :1, :] = 1
        mask[:, :, 1, :1] = 1
        self.register_buffer("mask", mask)

    def forward(self, x):
        with torch.no_grad():
            self.weight.data *= self.mask
        return super().forward(x.permute(0, 3, 1, 2))


module("set_source_Tensor", args(lambda: (torch.rand(2, 6, 6, 4) > 0.5).float()))(_MaskedConv)


def _param_views(x):
    x = torch.sigmoid(x).view(x.size(0), -1)
    p1 = nn.Parameter(x)
    with torch.no_grad():
        x.mul_(1.4386868137611386)
    y = torch.cat([x, x], dim=1)
    return p1, nn.Parameter(y), nn.Parameter(torch.zeros_like(x) + x)


# upstream runs it under no_grad only (nn.Parameter of a graph's intermediate)
lam("set_source_tensor_with_view_source", randn((2, 3, 4)), _param_views, grad=False)


class _ParamAssign(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 5, 3)
        self.batchnorm = nn.BatchNorm2d(5)
        self.conv_weight = torch.randn(5, 3, 3, 3)
        self.conv_bias = torch.randn(5)

    def forward(self, x):
        self.conv.weight = nn.Parameter(self.conv_weight)
        self.conv.bias = nn.Parameter(self.conv_bias, requires_grad=False)
        self.conv.eval()
        return F.relu(self.batchnorm(self.conv(x)))


module("nn_param_assign", randn((1, 3, 6, 6)))(lambda: _ParamAssign().eval())


class _CacheK(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.cache_k = torch.zeros(8, 4, 2, 2)

    def forward(self, x, xk):
        bsz, seqlen, _ = x.shape
        self.cache_k = self.cache_k.to(x)
        self.cache_k[:bsz, 1 : 1 + seqlen] = xk
        return self.cache_k


for _dt in (bf16, f16):
    module(f"fp32_load_with_to_lowp_fp_{str(_dt)[6:]}", randn((4, 2, 2), (4, 2, 2, 2), dtype=_dt))(
        lambda: _CacheK().eval()
    )

# -- values: NaN, inf, large -------------------------------------------------------------

module("conv_transpose2d_has_output_size_input", randn((1, 3, 10, 10)))(
    lambda: _OutputSize(nn.ConvTranspose2d(3, 1, 3, 1, 1)).eval()
)


class _OutputSize(nn.Module):
    def __init__(self, conv: nn.ConvTranspose2d) -> None:
        super().__init__()
        self.conv_transpose = conv

    def forward(self, x):
        return self.conv_transpose(x, output_size=(10, 10))


lam("pad_with_nan_value", randn((1, 3, 4, 4)), lambda x: F.pad(x, (1, 1, 1, 1), value=float("nan")))
lam(
    "masked_fill_with_inf_or_nan_value",
    args(lambda: torch.randn(2, 17), lambda: torch.rand(2, 17) > 0.5),
    lambda v, m: (torch.masked_fill(v, m, float("inf")), torch.masked_fill(v, m, float("-inf")), v.masked_fill(m, math.nan)),
)
lam(
    "relu_with_inf_value",
    args(lambda: torch.tensor([-572373.5000, 755109.1250, 330995.5625])),
    lambda x: torch.relu(torch.sinh(x)),
)
_ACOSH = [-8493.9854, 431654.1250, 71741.5859, 608234.5000, -103814.7500, -699397.0, -910685.8125, 875343.5]
for _dt in (torch.float32, bf16, torch.float64):
    lam(
        f"acosh_with_negative_large_input_{str(_dt)[6:]}",
        args(lambda dt=_dt: torch.tensor([_ACOSH]).repeat(3, 2).to(dt)),
        torch.acosh,
    )
for _dt in (torch.float32, bf16, f16, torch.float64):
    lam(
        f"asinh_with_corner_inputs_{str(_dt)[6:]}",
        args(lambda dt=_dt: torch.tensor([0, 0, 0, -10000.1]).repeat(3, 4).to(dt)),
        torch.asinh,
    )
lam(
    "asinh_large_float32_inplace",
    args(lambda: torch.tensor([[-1e30, 1e30, -5e28, 5e28, -7.5e29, 7.5e29, -2e30, 2e30, 0.0]]).repeat(3, 1)),
    lambda x: x.asinh_(),
)
module("rrelu_fallback_random", randn((1, 1, 10, 10)), random=True)(lambda: nn.RReLU().train())
# without grad only: torch's formula for the functional op reads its noise argument (here
# uninitialized), so eager's gradient is garbage (Note [Functional ops whose formula reads a
# written argument] in conveyor_autograd; the program through F.rrelu is checked with grad)
lam(
    "rrelu_with_noise_functional_fallback_random",
    randn((8, 8)),
    lambda x: aten.rrelu_with_noise_functional.default(x, torch.empty_like(x), 0.125, 1.0 / 3.0, True),
    random=True,
    grad=False,
)
lam(
    "rrelu_with_noise_functional_eval",
    randn((8, 8)),
    lambda x: aten.rrelu_with_noise_functional.default(x, torch.full_like(x, 7), 0.125, 1.0 / 3.0, False),
)


def _concat_with_conv():
    x1 = torch.randn(2, 3, 4, 4).to(memory_format=torch.channels_last)
    x2 = torch.randn(2, 5, 4, 4).to(memory_format=torch.channels_last)
    weight = torch.randn(4, 3, 3, 3).to(memory_format=torch.channels_last)
    return torch.cat([x1, x2], dim=1), F.conv2d(x1, weight, padding=1)


lam("require_stride_order_non_owning", args(), _concat_with_conv, random=True)
lam(
    "repeat_interleave",
    args(lambda: torch.tensor([[1, 2], [3, 4]])),
    lambda y: torch.repeat_interleave(y, 2, output_size=8),
)
module("inplace_squeeze_needed", randn((10,)))(
    lambda: nn.Sequential(nn.Linear(10, 10), nn.LayerNorm(10), nn.ReLU()).eval()
)


class _ConvMv(nn.Module):
    def __init__(self, shrink: bool) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 16, kernel_size=(1, 7), stride=(2, 1))
        self.shrink = shrink

    def forward(self, x, weight):
        x = self.conv(x)
        if self.shrink:
            x = F.hardshrink(x, lambd=0)
        return torch.mv(weight, x.view(x.size(0), -1)[0])


module("parallel_reduction_vectorization", randn((2, 3, 9, 17), (10, 880)))(lambda: _ConvMv(False).eval())
module("parallel_reduction_vectorization_hardshrink", randn((2, 3, 9, 17), (10, 880)))(lambda: _ConvMv(True).eval())
