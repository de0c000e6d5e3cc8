"""``CPUReproTests`` programs, fourth part: small models (attention, embeddings,
linear stacks), randomness (dropout, gumbel, a seed set inside the program),
data-dependent scalars, programs without inputs, and errors eager raises too.
Registered in :data:`cpu_repro_programs.PROGRAMS`."""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from cpu_repro_programs import args, lam, module, randn
from torch import nn

aten = torch.ops.aten
f16, bf16, f32, f64 = torch.float16, torch.bfloat16, torch.float32, torch.float64

# -- models ---------------------------------------------------------------------------------


class _Gmlp(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear, self.act, self.norm = nn.Linear(16, 24), nn.GELU(), nn.LayerNorm(12)
        self.proj, self.fc = nn.Linear(10, 10), nn.Linear(12, 16)

    def forward(self, x):
        u, v = self.act(self.linear(x)).chunk(2, dim=-1)
        v = self.proj(self.norm(v).transpose(-1, -2))
        return self.fc(u * v.transpose(-1, -2))


module("transpose_with_norm", randn((2, 10, 16)))(lambda: _Gmlp().eval())
module("transpose_with_norm_train", randn((2, 10, 16)))(_Gmlp)
module("linear_buffer_reuse", randn((1, 16)))(lambda: nn.Sequential(nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 16)).eval())
lam("in_out_buffer", randn((1, 2, 8, 4), (1, 2, 8, 4)), lambda x, y: torch.matmul(x, y.transpose(-1, -2)) / 8.0)


class _Attention(nn.Module):
    def __init__(self, hidden: int = 16) -> None:
        super().__init__()
        self.query, self.key, self.value = (nn.Linear(hidden, hidden) for _ in range(3))
        self.inv_scale = nn.Parameter(torch.Tensor([1 / hidden**0.5]), requires_grad=False)

    def forward(self, x):
        b, s, h = x.shape
        q = self.query(x).view(b, s, 1, h).permute(0, 2, 1, 3)
        k = self.key(x).view(b, s, 1, h).permute(0, 2, 3, 1)
        v = self.value(x).view(b, s, 1, h).permute(0, 2, 1, 3)
        return torch.matmul(torch.matmul(q, k).mul(self.inv_scale).softmax(dim=-1), v)


module("attention_size_mismatch", randn((1, 4, 16)))(_Attention)


def _closure_mask(batch, q_len, kv_len, q_offset, padding_mask):
    b = torch.arange(batch)[:, None, None, None]
    q = (torch.arange(q_len) + q_offset)[None, None, :, None]
    kv = torch.arange(kv_len)[None, None, None, :]
    return ((kv <= q) & padding_mask[b, kv]).expand(batch, 1, q_len, kv_len)


class _SdpaCache(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(32, 32, bias=False)

    def forward(self, x, past_k, past_v, padding_mask, q_offset):
        b, s, _ = x.shape
        q = self.proj(x).view(b, s, 4, 8).transpose(1, 2)
        k = x.view(b, s, 4, 8).transpose(1, 2)
        v = k.clone()
        if past_k is not None:
            k, v = torch.cat([past_k, k], dim=2), torch.cat([past_v, v], dim=2)
        out = F.scaled_dot_product_attention(q, k, v, attn_mask=_closure_mask(b, s, k.shape[2], q_offset, padding_mask))
        return out.transpose(1, 2).reshape(b, s, 32), k, v


_PAD = torch.ones(1, 9, dtype=torch.bool)
_PAD[0, :2] = False
module("sdpa_closure_mask_recompile_prefill", args(lambda: torch.randn(1, 8, 32), lambda: None, lambda: None, lambda: _PAD[:, :8].clone(), lambda: 0))(_SdpaCache)
module(
    "sdpa_closure_mask_recompile_decode",
    args(lambda: torch.randn(1, 1, 32), *[lambda: torch.randn(1, 4, 8, 8)] * 2, lambda: _PAD.clone(), lambda: 8),
)(_SdpaCache)


class _HardswishSdpa(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.hardswish, self.layernorm = nn.Hardswish(), nn.LayerNorm([2])

    def forward(self, x):
        out = self.hardswish(x).unfold(1, 2, 1)
        out = torch.roll(F.scaled_dot_product_attention(out, out, out), 1, 2)
        return torch.nan_to_num(self.layernorm(out))


module("issue_181624_cpu_fusion_with_constant_index_expr", randn((2, 6)))(lambda: _HardswishSdpa().eval())


class _QkvConv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.q_conv, self.k_conv, self.v_conv = (nn.Conv2d(4, 4, 1) for _ in range(3))

    def forward(self, x):
        q, k, v = (c(x).permute(0, 2, 1, 3) for c in (self.q_conv, self.k_conv, self.v_conv))
        return F.scaled_dot_product_attention(q, k, v, dropout_p=0.0, is_causal=False)


module("fused_attention_conv", randn((1, 4, 2, 2)))(_QkvConv)
module("linear_with_no_default_contiguous_input", args(lambda: torch.as_strided(torch.randn(1, 16, 1, 1), [1, 16], [0, 1], 0)))(
    lambda: nn.Sequential(nn.Linear(16, 16)).eval()
)


class _LinearView(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(16, 16, bias=False)

    def forward(self, x):
        return self.linear(x).view(4, 4, 4)


module("linear_with_reshape", randn((4, 16)))(lambda: _LinearView().eval())


class _MmF64(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.weight1, self.weight2 = (nn.Parameter(torch.randn(10, 10, dtype=f64)) for _ in range(2))
        self.bias = nn.Parameter(torch.randn(10, dtype=f64))

    def forward(self, x1):
        return torch.mm(x1, self.weight1), torch.addmm(self.bias, x1, self.weight2)


module("linear_float64", randn((10, 10), dtype=f64))(lambda: _MmF64().eval())


class _ConvMaxChannels(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(39, 1, kernel_size=(1, 17), stride=(2, 2))

    def forward(self, x):
        return self.conv(x.max(3).values)


module("non_contiguous_reduction_store", randn((1, 39, 1, 18, 17)))(_ConvMaxChannels)


class _Emb(nn.Module):
    def __init__(self, add: bool) -> None:
        super().__init__()
        self.emb, self.add = nn.Embedding(16, 8), add

    def forward(self, idx, x):
        return self.emb(idx) + x if self.add else self.emb(idx)


module("embedding_vec", args(lambda: torch.randint(0, 16, (2, 5)), lambda: torch.randn(2, 5, 8)))(lambda: _Emb(True).eval())
module("embedding_vec_bf16", args(lambda: torch.randint(0, 16, (2, 5)), lambda: torch.randn(2, 5, 8, dtype=bf16)))(lambda: _Emb(False).eval())
lam("concat_inner_vec", randn((4, 5), (4, 7)), lambda x, y: F.relu(torch.cat([x, y], dim=1)))


class _UpsampleConv(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv, self.conv2 = nn.Conv2d(4, 4, 3, padding=1), nn.Conv2d(4, 2, 3, padding=1)
        self.upsample = nn.Upsample(scale_factor=2, mode="bilinear", align_corners=True)

    def forward(self, x):
        return torch.relu(self.conv2(self.upsample(self.conv(x))))


module("upsample_layout", randn((1, 4, 6, 6)))(_UpsampleConv)


def _two_convs(data, weight_one, weight_two, bias_one, bias_two):
    one = aten.convolution.default(data, weight_one, bias_one, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    two = aten.convolution.default(data, weight_two, bias_two, [1, 1], [1, 1], [1, 1], False, [0, 0], 1)
    return one, two, F.max_pool2d(one, [1, 1], [2, 2], [0, 0], [1, 1], False)


lam("broadcast_scalar_cpp_tile_2d_kernel", randn((1, 4, 8, 10), (4, 4, 1, 1), (4, 4, 3, 3), (4,), (4,)), _two_convs)
def _param_assign_wrapped():
    from cpu_repro_catalogue import _ParamAssign

    m = _ParamAssign().eval()

    @functools.wraps(m)
    def wrapper(*a, **k):
        return m(*a, **k)

    return wrapper


module("nn_param_assign_wrapped", randn((1, 3, 6, 6)))(_param_assign_wrapped)

# -- randomness ---------------------------------------------------------------------------------


def _dropout_model(dim: int) -> nn.Module:
    class M(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.dropout = (nn.Dropout1d, nn.Dropout2d, nn.Dropout3d)[dim - 1](p=0.5)

        def forward(self, x):
            torch.manual_seed(0)
            return self.dropout(x)

    return M()


for _d in (1, 2, 3):
    module(f"dropout_{_d}d", randn((1, 3) + (6,) * _d), random=True)(lambda d=_d: _dropout_model(d))


def _gumbel(x):
    x = F.gumbel_softmax(x, tau=1.0, hard=True)
    x = torch.where(x > 0.5, x, torch.zeros_like(x))
    return torch.scatter(x, dim=1, index=torch.ones(1, 2, dtype=torch.long), src=torch.ones_like(x))


lam("issue_148058", randn((1, 2)), _gumbel, random=True)


def _seeded(kind: str, dtype: torch.dtype):
    def fn(seed):
        torch.manual_seed(seed)
        if kind == "randint":
            return torch.randint(0, 64, (64,), dtype=dtype)
        return getattr(torch, kind)(64, dtype=dtype)

    return fn


for _kind, _dt in [("randn", f32), ("rand", bf16), ("randint", torch.int8)]:
    lam(f"vec_randn_{_kind}_{str(_dt)[6:]}", args(lambda: 2024), _seeded(_kind, _dt), random=True)
lam(
    "randint_symint_input",
    args(lambda: torch.zeros(10, dtype=torch.long), lambda: 4),
    lambda lengths, num_slices: torch.randint(lengths.shape[0], (num_slices,), device=lengths.device),
    random=True,
)
for _dt in (f64, f16, None):
    # Inductor computes a float16 normal in float32 and rounds once (a float16 ulp apart)
    lam(f"aten_normal_dtype_{_dt}", args(), lambda dt=_dt: torch.normal(2, 3, (10, 10), dtype=dt, device="cpu"), random=True, tol=(1e-2, 1e-2))
lam(
    "sdpa_dropout",
    randn((2, 2, 8, 4), (2, 2, 8, 4), (2, 2, 8, 4)),
    lambda q, k, v: F.scaled_dot_product_attention(q, k, v, attn_mask=None, dropout_p=0.2),
    random=True,
)

# -- scalars read from tensors, data-dependent sizes -----------------------------------------------


def _softmax_item(x, n):
    return torch.softmax(x[:, : n.item()], -1), torch.log_softmax(x[:, : n.item()], -1)


lam("softmax_with_unbacked_zero_dim", args(lambda: torch.randn(3, 5), lambda: torch.tensor(2)), _softmax_item)
lam("softmax_with_unbacked_zero_dim_0", args(lambda: torch.randn(3, 5), lambda: torch.tensor(0)), _softmax_item)


def _item_from_size1(x, w):
    num = x.new_tensor([x.nonzero().numel()]).item()
    return (w * x).sum() / num


lam("backward_dynamic_item_from_size1_tensor", args(lambda: torch.tensor([0.0, 1.0, -1.0, 0.5]), lambda: torch.tensor(0.0)), _item_from_size1)
lam(
    "lp_pool2d_symbolic_float_min_norm_type",
    randn((1, 1, 4, 4)),
    lambda x: F.lp_pool2d(x, norm_type=min(4.0, 0.5 + float(x.mean().abs().detach()) * 1.5), kernel_size=1),
)
lam("symbolic_shape_scalar_value_reduction", args(lambda: 100, lambda: torch.randn(100)), lambda n, y: y + torch.ones(n).sum())
lam("skip_cpp_codegen", args(lambda: torch.ones(20), lambda: torch.rand(20)), lambda x, y: x + y + torch.tensor(1))
lam("skip_cpp_codegen_tensor_slice", args(lambda: torch.ones(20)), lambda x: x[torch.tensor(1) :] * 2)
lam(
    "skip_cpp_codegen_empty_min",
    args(lambda: torch.rand(10, 3, 0)),
    lambda v1: torch.randn_like(v1.min(dim=1).values),
    random=True,
)

# -- programs without inputs ------------------------------------------------------------------


def _swin_mask():
    img_mask = torch.zeros((1, 14, 14, 1))
    slices = (slice(0, -7), slice(-7, -3), slice(-3, None))
    count = 0
    for h in slices:
        for w in slices:
            img_mask[:, h, w, :] = count
            count += 1
    windows = img_mask.view(1, 2, 7, 2, 7, 1).permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, 49)
    attn_mask = windows.unsqueeze(1) - windows.unsqueeze(2)
    return attn_mask.masked_fill(attn_mask != 0, -100.0).masked_fill(attn_mask == 0, 0.0)


lam("masked_handle_scalar_var", args(), _swin_mask)
lam(
    "meta_device",
    args(),
    lambda: aten.empty.memory_format([64, 8, 8], dtype=f16, device="meta", pin_memory=False).sin() + 1,
)


def _many_muls(x):
    for _ in range(1000):  # upstream: 10000 (see the report: 53 s, 221 s with grad, to compile)
        x = 1.0 * x
    return x


lam("inductor_no_recursionerror_on_for_loops", args(lambda: torch.tensor([1.0])), _many_muls)


def _vec_indirect(arg0_1):
    select, select_1 = arg0_1[0], arg0_1[1]
    expand = select_1.reshape(-1).expand(50)
    scatter_add = aten.scatter_add.default(torch.full([20], 0), 0, expand, torch.full([50], 1))
    pow_1 = scatter_add.pow(-0.5)
    where = torch.where(pow_1 == float("inf"), torch.full([], 0.0), pow_1)
    return (where[select] * where[select_1],)


lam("vec_indirect_load_cse_cache", args(lambda: torch.zeros(2, 50, dtype=torch.int64)), _vec_indirect)

# -- errors eager raises too -----------------------------------------------------------------------

lam("invalid_index_of_empty_tensor", args(lambda: torch.tensor([])), lambda a: a[[0]])
lam(
    "invalid_dropout_args",
    args(lambda: torch.tensor([[1, 2, 3], [4, 5, 6]])),
    lambda x: torch.relu(F.dropout(x * 2, p=0.5)),
)
lam(
    "slice_scatter_issue122291",
    args(lambda: torch.zeros(16, 16), lambda: torch.ones(16, 2), lambda: 1, lambda: 4, lambda: 10, lambda: 1),
    lambda t, src, dim, start, end, step: t.slice_scatter(src, dim, start, end, step),
)
