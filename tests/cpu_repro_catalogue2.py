"""``CPUReproTests`` programs, second part: integer and bool dtypes, bitwise ops,
casts, low-precision values, small pointwise and reduction repros, indexing and
index_put, NaN / inf loads. Registered in :data:`cpu_repro_programs.PROGRAMS`."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from cpu_repro_programs import args, lam, randn
from torch import nn

aten = torch.ops.aten
f16, bf16, f32, f64 = torch.float16, torch.bfloat16, torch.float32, torch.float64


def _s(dt: torch.dtype) -> str:
    return str(dt)[6:]


# -- bitwise, logical, integer ----------------------------------------------------------

lam("frexp", randn((64, 1)), lambda x: (lambda m, e: m * e)(*torch.frexp(x)))
lam("ops_masked_with_bool_input", args(lambda: torch.zeros(129, dtype=torch.bool)), lambda x: torch.constant_pad_nd(x, [2, 3]))
lam("bitwise_right_shift", args(lambda: torch.randint(-1, 0, (1, 1, 1))), lambda x: torch.bitwise_right_shift(x, 31))
for _f in (torch.bitwise_left_shift, torch.bitwise_right_shift):
    lam(
        f"bitwise_shift_corner_inputs_{_f.__name__[8:]}",
        args(lambda: torch.tensor(1000), lambda: torch.tensor(64)),
        _f,
    )
lam("view_dtype", args(lambda: torch.ones(16, 16)), lambda x: x.view(torch.int32) >> 2)
lam(
    "scatter_using_atomic_add",
    args(lambda: torch.randn(5, 29, 13), lambda: 2, lambda: torch.tensor([[[3, 5, 7, 9]]]), lambda: torch.randn(1, 1, 10)),
    lambda a, dim, index, b: aten.scatter(a, dim, index, b, reduce="add"),
)
lam(
    "scatter_using_atomic_add_vec",
    args(lambda: torch.zeros(1, 1, 25), lambda: 2, lambda: torch.tensor([[[3, 5, 7, 9] * 5]]), lambda: torch.ones(1, 1, 25)),
    lambda a, dim, index, b: aten.scatter(a, dim, index, b, reduce="add"),
)
lam(
    "vec_logical",
    randn((64,), (64,)),
    lambda x, y: tuple(torch.where(f(x, y), 1.0, 0.0) for f in (torch.logical_and, torch.logical_or, torch.logical_xor))
    + (torch.where(torch.logical_not(x), 1.0, 0.0),),
)


def _bitwise(x, y):
    out = (x & y, ~x, x | y, x ^ y)
    return out if x.dtype == torch.bool else (*out, x << y.clamp(0, 7), x >> y.clamp(0, 7))


for _dt in (torch.bool, torch.uint8, torch.int8, torch.int32, torch.int64):
    lam(
        f"vec_bitwise_{_s(_dt)}",
        args(*[lambda dt=_dt: (torch.randn(64) > 0) if dt == torch.bool else (torch.randn(64) * 10).to(dt)] * 2),
        _bitwise,
    )
lam(
    "bitwise_logical_op_bool",
    args(lambda: torch.randint(0, 3, (64,)), lambda: torch.randint(0, 3, (64,), dtype=torch.uint8)),
    lambda a, b: tuple(
        f(a > 1, b > 1)
        for f in (torch.bitwise_and, torch.bitwise_or, torch.bitwise_xor, torch.logical_and, torch.logical_or, torch.logical_xor)
    ),
)
lam(
    "torch_logit",
    args(lambda: torch.tensor(0.3, dtype=f64), lambda: torch.tensor(0.9, dtype=f64)),
    lambda x, eps: torch.logit(x, eps),
)


def _compare_chain(x):
    neg, down, up = (lambda t: -t), (lambda t: t - 1.0), (lambda t: t + 1.0)
    steps = [(torch.eq, 1.0, neg), (torch.ne, 0.0, neg), (torch.lt, 5.0, down), (torch.gt, -2.0, up)]
    steps += [(torch.le, 8.0, down), (torch.ge, -3.0, up)]
    for cmp, other, otherwise in steps * 2:
        x = torch.where(cmp(x, other), x, otherwise(x))
    return x


for _dt in (f32, bf16):
    lam(f"vec_compare_op_cpu_only_{_s(_dt)}", randn((2, 9), dtype=_dt), _compare_chain)
for _dt in (torch.int8, torch.uint8, torch.int32, torch.int64, bf16, f16, f32, f64):
    if _dt.is_floating_point:
        _make = randn((64,), (64,), dtype=_dt)
    else:
        _lo = 1 if _dt == torch.uint8 else -100
        _make = args(
            lambda dt=_dt, lo=_lo: torch.randint(lo, 100, (64,), dtype=dt),
            lambda dt=_dt, lo=_lo: (lambda y: torch.where(y == 0, torch.ones_like(y), y))(torch.randint(lo, 100, (64,), dtype=dt)),
        )
    lam(f"vec_remainder_{_s(_dt)}", _make, torch.remainder)
for _dt in (torch.int8, torch.uint8, torch.int32, torch.int64):
    lam(
        f"int_div_vec_{_s(_dt)}",
        args(*[lambda dt=_dt: torch.randint(1, 100, (8, 8), dtype=dt)] * 2),
        lambda x, y: (torch.div(x, y), torch.div(x, y, rounding_mode="trunc"), torch.div(x, y, rounding_mode="floor")),
    )
_U8 = args(*[lambda: torch.randint(0, 255, (3, 3), dtype=torch.uint8)] * 2)
lam("uint8_add", _U8, lambda x, y: torch.add(x, y).neg().to(torch.int32))
lam("uint8_sub", _U8, lambda x, y: torch.sub(x, y).neg().to(torch.int32))
lam("float32_to_uint8", args(lambda: torch.tensor([-1.0, -2.0, -3.0, -4.0])), lambda x: x.to(torch.uint8))
for _dt in (torch.int32, torch.int64, torch.uint32, torch.uint64):
    lam(f"{_s(_dt)}_pointwise_vec", args(lambda dt=_dt: torch.randint(0, 100, (37, 37), dtype=dt)), lambda x: x * x)
    lam(f"{_s(_dt)}_reduction_vec", args(lambda dt=_dt: torch.randint(0, 100, (37, 37), dtype=dt)), lambda x: x.sum(dim=1))
for _src in (torch.int8, torch.uint8):
    for _dst in (bf16, f16):
        lam(
            f"convert_{_s(_src)}_to_{_s(_dst)}_vec",
            args(lambda src=_src: torch.randint(0 if src == torch.uint8 else -100, 100, (32, 32), dtype=src)),
            lambda x, dst=_dst: x.to(dst),
        )
lam(
    "convert_int_casts_vec",
    args(lambda: torch.randint(0, 100, (32, 32), dtype=torch.int32), lambda: torch.randint(0, 100, (32, 32))),
    lambda i32, i64: (i32.to(torch.int64), i64.to(torch.int32), i64.to(f32)),
)
lam("convert_fp32_to_int64_vec", args(lambda: torch.rand(32, 32) * 10), lambda x: x.to(torch.int64))
lam("double_pointwise_reduction_vec", randn((37, 37), dtype=f64), lambda x: (x * x, x.sum(dim=1), x.to(f32)))
lam("convert_fp32_to_double_vec", randn((37, 37)), lambda x: x.to(f64))
lam(
    "convert_fp32_int64_oob_vec",
    args(lambda: torch.full((32,), -9223372036854775808, dtype=torch.int64)),
    lambda x: x.to(f32).to(torch.int64),
)
lam("masked_load_int64_vec", args(lambda: torch.randint(0, 100, (819,))), lambda x: F.pad(x, (0, 13)))
lam("reduction_float_to_int64", args(lambda: torch.randint(0, 100, (22, 51))), lambda x: x.max(0).values)
for _i, _f in [(torch.int64, f64), (torch.int32, f32), (torch.int16, f16), (torch.int8, bf16)]:
    lam(
        f"store_reduction_{_s(_i)}_{_s(_f)}",
        args(lambda i=_i: torch.randint(0, 100, (4, 6, 7), dtype=i), lambda f=_f: torch.randn(4, 6, 7, dtype=f)),
        lambda x, y: (x.amax(dim=0), y.amax(dim=0)),
    )
for _op in (torch.any, torch.min, torch.max):
    lam(
        f"bool_reduction_vec_{_op.__name__}",
        args(lambda: torch.zeros(63, dtype=torch.bool), lambda: torch.arange(63) == 10, lambda: torch.ones(63, dtype=torch.bool)),
        lambda a, b, c, op=_op: (op(a), op(b), op(c)),
    )
lam("bool_max", args(lambda: torch.randn(8, 33).ge(0)), lambda x: torch.max(x, 1, False))
for _dt in (torch.float8_e4m3fn, torch.float8_e5m2):
    lam(f"bool_to_{_s(_dt)}", args(lambda: torch.rand(64) > 0.5), lambda x, dt=_dt: x.to(dtype=dt))
lam(
    "avx2_bool_constant_pad_nd",
    args(lambda: torch.zeros(0, 6, 6, dtype=torch.bool)),
    lambda x: torch.constant_pad_nd(x, (1, 1, 1, 1, 1, 1)),
)
lam(
    "unrolled_bool_prod_vectorized",
    args(lambda: torch.rand(7, 7, 7) > 0.1),
    lambda x: torch.prod(x, 1, dtype=torch.bool),
)
for _dt in (f16, bf16, f32):
    lam(
        f"fp8_cast_{_s(_dt)}",
        args(lambda dt=_dt: torch.rand(15, 3, 13, dtype=dt)),
        lambda x: (x.to(torch.float8_e4m3fn).to(x.dtype), x.to(torch.float8_e5m2).to(x.dtype)),
    )
for _dt in (bf16, f16):
    lam(
        f"logical_op_store_to_lowp_data_dtype_{_s(_dt)}",
        args(*[lambda dt=_dt: torch.rand(3, 2, 8, 2, dtype=dt)] * 2, lambda: torch.rand(3, 2, 8, 2), lambda: torch.rand(3, 2, 8, 2)),
        lambda o1, o2, x, y: (torch.logical_or(x, y, out=o1), torch.logical_xor(x, y, out=o2)),
        grad=False,  # out= into tensors requiring grad is an error in eager and compiled alike
    )

# -- lowp, casts --------------------------------------------------------------------------

for _dt in (bf16, f16):
    lam(f"redundant_to_node_elimination_lowp_fp_{_s(_dt)}", randn((2, 9), (2, 9), dtype=_dt), lambda x, y: torch.mean(x + y))
    lam(f"lowp_fp_neg_abs_{_s(_dt)}", randn((16, 16), dtype=_dt), lambda x: x.neg().abs())
    lam(f"to_channels_last_lowp_fp_{_s(_dt)}", args(lambda dt=_dt: torch.rand(2, 3, 6, 6).to(dt)), lambda a: a.to(memory_format=torch.channels_last))
    lam(f"broadcast_mul_lowp_fp_{_s(_dt)}", randn((2, 16, 16), (2, 1, 1), dtype=_dt), lambda a, b: a * b)
    lam(f"transpose_mxn_bf16_fp16_{_s(_dt)}", randn((8, 6, 6), (8, 6, 6), dtype=_dt), lambda a, b: (a * b.transpose(1, 2)).sum(dim=1))
    lam(f"transpose_mxn_32_32_{_s(_dt)}", randn((2, 40, 40), dtype=_dt), lambda a: a.permute(0, 2, 1).contiguous())
lam("do_not_insert_to_dtype_for_memory_copy_only_kernel", randn((16, 16), dtype=bf16), lambda x: x.clone())
lam("insert_to_dtype_count", randn((16, 16), dtype=bf16), lambda x: x.relu())
lam(
    "emulate_precision_casts_explicit_lowp_round_trip",
    args(lambda: torch.arange(20, dtype=f32).reshape(5, 4).t() / 7.0),
    lambda x: (lambda y: (y, y.sum(dim=1)))(x.to(f16).to(f32)),
)
lam("memory_copy_with_fusion", randn((16, 16), dtype=bf16), lambda x: (lambda r: (x.copy_(r), r)[1:])(x.relu()))
lam("scalar_mul_bfloat16", randn((4, 5), dtype=bf16), lambda x: aten.mul.Tensor(x, 1.7015043497085571))
lam("bf16_zeros", args(), lambda: torch.zeros(1, 1, 32, dtype=bf16))
lam("load_half", randn((2, 10), (2, 10), dtype=f16), lambda a, b: a.copy_(b))


def _robust_power(base, exponent, threshold):
    cond = torch.abs(base) < threshold.expand_as(base)
    return torch.where(cond, base / threshold, base**exponent)


lam(
    "emulate_precision_casts_cpp_backend_no_error",
    args(lambda: torch.randn(10, dtype=f16), lambda: torch.tensor(2.0, dtype=f16), lambda: torch.tensor(0.01, dtype=f16)),
    _robust_power,
)


def _fused_fp16(x, c):
    y = torch.where(c, torch.full_like(x, 0.5), torch.full_like(x, -0.5)).to(f16) + x.to(f16)
    return y, y.float().sum()


lam(
    "emulate_precision_casts_preserves_fused_fp16_rounding",
    args(lambda: torch.arange(24, dtype=f32).reshape(2, 3, 4) / 10, lambda: (torch.arange(24) % 5 == 0).reshape(2, 3, 4)),
    _fused_fp16,
)
_P0 = torch.tensor([1.0879], dtype=f16)
lam(
    "no_redundant_to_dtypes_between_fused_scheduler_node",
    args(*[lambda s=s: torch.randn(s).half() for s in [(3, 5, 1, 7), (3, 5, 1, 7), (3, 5, 11, 7), (3, 5, 1, 7)]], lambda: torch.tensor(4.39, dtype=f16)),
    lambda *a: (lambda mul: (mul, torch.tan(mul)))(torch.cat((a[3], a[2], a[1], a[0]), dim=2) * torch.max(a[4], _P0)),
)


def _highp_to_lowp(x, x2, x3):
    from torch._inductor import test_operators

    temp = test_operators.realize(x2.to(torch.int32).to(f16))
    return torch.mm(temp, x3.to(f16)), temp.to(f32) * x


lam(
    "highp_to_lowp_cse_var_cache_with_store",
    args(lambda: torch.randn(5, 16), lambda: torch.randint(0, 10, (5, 16), dtype=torch.int8), lambda: torch.randn(16, 16)),
    _highp_to_lowp,
)


def _consistent_remove_buffers(x):
    from torch._inductor import test_operators

    return x + test_operators.realize(x + x)


lam("consistent_remove_buffers", randn((65,), dtype=bf16), _consistent_remove_buffers)


# -- small pointwise and reduction repros -----------------------------------------------

lam("cat_mul", randn((3, 4), (3, 4)), lambda p0, p1: (lambda y: (y, y * y))(torch.cat([p0, p1], dim=0)))
lam("pow_cos", args(lambda: torch.tensor([4], dtype=torch.uint8)), lambda x: torch.cos(x.pow(5)))
lam("reduce_with_masked", randn((2,), (2,)), lambda a, b: (F.pad(a, (0, -1)) + b).min(0).values)
lam("scalar_sign_with_min", randn((1, 3)), lambda a: torch.min(torch.tanh(a), torch.sign(torch.tanh(a))))
lam("tanh_atan2", randn((1, 3, 8, 8)), lambda x: (lambda y: torch.atan2(y, y))(nn.Tanhshrink()(x)))
lam(
    "index_propagation_issue_102065",
    randn((8,)),
    lambda x: (lambda r: (r.unsqueeze(0) - r.unsqueeze(1)) ** 2)(torch.arange(x.numel())),
)
lam(
    "low_fp_index_expr_issue_147279",
    args(lambda: 300, lambda: 400, lambda: f16, lambda: (0,)),
    lambda start, end, dtype, dim: torch.sum(torch.arange(start=start, end=end, dtype=dtype), dim=dim),
)


def _index_put(x, y):
    x = x + 10
    y[x] += y[x]


def _index_put2(y, index0, index1):
    y[index1] += y[index0]


def _index_add(x, y, scale_y, index):
    return x.index_add_(dim=0, source=x[index] + y * scale_y, index=index)


lam("index_put", args(lambda: torch.randint(-10, -9, (1, 2)), lambda: torch.randn(2, 32)), _index_put)
lam(
    "index_put2",
    args(lambda: torch.randn(2, 32), lambda: torch.tensor([[0, 1]]), lambda: torch.tensor([[1, 0]])),
    _index_put2,
)
lam(
    "index_add",
    args(*[lambda s=s: torch.randn(*s) for s in [(10, 10), (5, 10), (10,)]], lambda: torch.randperm(10)[:5].int()),
    _index_add,
)
lam(
    "index_add_duplicate_index",
    args(*[lambda s=s: torch.randn(*s) for s in [(10, 10), (5, 10), (10,)]], lambda: torch.zeros(5, dtype=torch.int32)),
    _index_add,
)


def _modular_indexing(q, k):
    scores = torch.einsum("bcxd,bcyd->bcxy", (q, k))
    view = aten.constant_pad_nd.default(scores, [0, 0, 0, 1], 0.0).view(2, 1, 16, 17)
    y = view.new_zeros((2, 2, 8, 17))
    y[:, :-1, :, 8:] = view[:, :, :8, :9]
    return y


def _seq_major() -> torch.Tensor:
    return torch.randn(16, 2, 4).permute(1, 0, 2).unsqueeze(1)


lam("ModularIndexing_range_issue_103133", args(_seq_major, _seq_major), _modular_indexing)
for _dt in (bf16, f16):
    _s = str(_dt)[6:]
    lam(f"max_reduction_lowp_fp_{_s}", randn((1, 8, 4, 4), dtype=_dt), lambda x: aten.max(x, 1, keepdim=True)[0].float())
    lam(
        f"vec_transpose_lowp_fp_{_s}",
        randn((2, 3, 4, 4)),
        lambda x, dt=_dt: x.to(memory_format=torch.channels_last).to(dt),
    )
lam("load_inf_bf16", randn((1, 3, 4, 4)), lambda x: torch.where(x > 0, x, math.inf))
lam("load_inf_bf16_neg", randn((1, 3, 4, 4)), lambda x: torch.where(x > 0, x, -math.inf))
lam(
    "sigmoid_with_reduction",
    randn((1, 8, 8, 8)),
    lambda x: aten.mean.dim(aten.sigmoid.default(x), [-1, -2], True),
)


def _longformer(query, key, window_overlap):
    batch_size, seq_len, num_heads, head_dim = query.size()
    chunks_count = torch.div(seq_len, window_overlap, rounding_mode="trunc") - 1
    scores = key.new_zeros((batch_size * num_heads, chunks_count + 1, window_overlap, window_overlap * 2 + 1))
    scores[:, :3, :, window_overlap:] = key[:, :, :window_overlap, : window_overlap + 1]
    return scores


lam("slice_scatter_default_end_value", args(lambda: torch.randn(1, 16, 2, 4), lambda: torch.randn(2, 3, 8, 9), lambda: 4), _longformer)
lam(
    "to_uint8_rounding_method",
    args(lambda: torch.tensor([4.4, 4.5, 4.6, 5.5]).repeat(5)),
    lambda x: x.to(torch.uint8),
)
lam(
    "inplace_add_alpha",
    args(lambda: torch.zeros(10), lambda: torch.randn(10)),
    lambda x, y: (aten.add_.Tensor(x, y, alpha=0.55), x)[1:],
)


def _int_div(x, y):
    s3 = x.size(1)
    a = torch.ones((1 + s3) // 2)
    a += y
    return a, s3


lam("int_div", args(lambda: torch.randint(5, (1, 8)), lambda: torch.randn(1)), _int_div)
lam("no_op_squeeze", randn((10, 20)), lambda x: aten.squeeze.dim(x, 1))
lam("vec_dynamic_shapes", randn((2, 10)), lambda x: torch.softmax(x, -1))
for _dt in (torch.float32, bf16):
    lam(
        f"masked_fill_softmax_{str(_dt)[6:]}",
        args(lambda dt=_dt: torch.randn(2, 17, dtype=dt), lambda: torch.randint(0, 2, (2, 17), dtype=torch.uint8)),
        lambda v, m: torch.softmax(torch.masked_fill(v, m.to(torch.bool), -33.0), -1),
    )
lam(
    "channels_last_view_as_complex",
    randn((1, 1, 1, 8), (1, 1, 1, 8)),
    lambda x, y: torch.view_as_complex(torch.stack([x.float(), y.float()], dim=-1)),
)
lam(
    "load_same_bool_tensor_twice",
    args(lambda: torch.randn(2, 17), lambda: torch.rand(2, 17) > 0.5),
    lambda a, b: (torch.masked_fill(a, b, -33.0), torch.masked_fill(a, b, -33.0)),
)
for _dt in (bf16, f16):
    lam(
        f"atomic_add_lowp_fp_{str(_dt)[6:]}",
        args(lambda dt=_dt: torch.tensor([[3.0, -5.0]], dtype=dt), lambda: torch.tensor([[1]])),
        lambda x, index: torch.gather(**{"input": x, "dim": 1, "index": index}),
    )
