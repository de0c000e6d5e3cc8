"""Ops that ran as aten calls before, now generated kernels: ``argmax`` /
``argmin`` (Note [Arg reductions] in ``conveyor_triton.codegen_reduce``) and ``cat``
(Note [Cat in a group]) and ``cumsum`` over the last dimension (Note [Scans]),
against eager with the interpreter's launches and with
a GPU's (``launch_for="cuda"``), static and generic kernels."""

from __future__ import annotations

import conveyor_triton
import pytest
import torch
from conveyor.testing import check
from conveyor_triton import aot

NAN = float("nan")


def _args_with_nan_and_ties(dtype: torch.dtype = torch.float32) -> torch.Tensor:
    x = torch.randn(6, 37).to(dtype)
    x[1, 5] = NAN
    x[1, 20] = NAN  # the first NaN of the row wins
    x[2, :] = 1.0  # all tied: index 0
    x[3, 3] = x[3, 30] = 50.0  # tied maxima: the first
    x[3, 4] = x[3, 31] = -50.0
    x[4, :] = float("-inf")
    x[5, :] = float("inf")
    x[5, 9] = NAN
    return x


def arg_reductions(x):
    return (
        x.argmax(-1),
        x.argmin(-1),
        x.argmax(0),
        x.argmin(0, keepdim=True),
        x.argmax(),
        x.argmin(),
        x.argmax(1, keepdim=True) + 1,
    )


def arg_of_computed(x):
    y = x * 2 + 1
    return y.argmax(-1), (y - y.amax(-1, keepdim=True)).exp().sum(-1), y.argmin(-1) * 3


def _kernel_ops(compiled) -> list[str]:
    return [n for r in conveyor_triton.reports(compiled) for k in r.kernels for n in k.nodes]


LAUNCHES = [pytest.param({}, id="interpreter"), pytest.param({"launch_for": "cuda"}, id="gpu-launches")]


@pytest.mark.parametrize("launch", LAUNCHES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_arg_reductions_nan_and_ties(launch, dtype, triton_only):
    result = check(arg_reductions, _args_with_nan_and_ties(dtype), compile=triton_only(**launch))
    assert not [f for r in conveyor_triton.reports(result.compiled) for f in r.fallbacks]


@pytest.mark.parametrize("launch", LAUNCHES)
@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8])
def test_arg_reductions_integers(launch, dtype, triton_only):
    x = torch.randint(-3 if dtype is not torch.uint8 else 0, 4, (5, 33)).to(dtype)
    check(arg_reductions, x, compile=triton_only(**launch))


@pytest.mark.parametrize("launch", LAUNCHES)
@pytest.mark.parametrize("shape", [(3, 5000), (2, 3, 4100), (9000,), (4100, 3)], ids=str)
def test_arg_reductions_of_long_rows_loop(launch, shape, triton_only):
    x = torch.randn(shape)
    x.view(-1)[x.numel() // 2] = NAN
    x.view(-1)[x.numel() // 2 + 7] = NAN
    y = torch.randn(shape).round()  # many ties
    check(lambda a, b: (a.argmax(-1), a.argmin(0), b.argmax(-1), b.argmin(), b.argmax()), x, y, compile=triton_only(**launch))


@pytest.mark.parametrize("launch", LAUNCHES)
def test_arg_reductions_fuse_and_read_non_contiguous_inputs(launch, triton_only):
    x = torch.randn(8, 12)
    result = check(arg_of_computed, x.t(), compile=triton_only(**launch))
    ops = _kernel_ops(result.compiled)
    assert any(op.startswith("argmax") for op in ops) and any(op.startswith("argmin") for op in ops)
    check(lambda a: (a.argmax(1), a[:, ::2].argmin(0)), torch.randn(4, 6, 5).transpose(0, 2), compile=triton_only(**launch))


def test_arg_reductions_edge_cases(triton_only):
    check(lambda a: (a.argmax(), a.argmin(0)), torch.tensor(3.0), compile=triton_only())  # 0-dim
    check(lambda a: a.argmax(1), torch.randn(0, 4), compile=triton_only())  # empty: eager raises, so does aten
    check(lambda a: a.argmax(1), torch.randn(3, 4) > 0, compile=triton_only())  # bool: eager raises


def cat_chain(a, b, c):
    return torch.cat([a, b, c], 1).sin() * 2, torch.cat([a, b], -1) + 1


def cat_into_reductions(a, b):
    return torch.cat([a, b], 0).sum(-1), torch.cat([a, b], 1).amax(0), torch.cat([a, b], -1).argmax(-1)


def cat_promotes(a, m, e):
    return torch.cat([a, m, e], 0) * 3, torch.cat([m, m], 1), torch.cat([a.float(), a.half()], 1)


def cat_of_16_bit_views(a, b):
    return torch.cat([a, b], 1) * torch.cat([b, a], 1), torch.cat([a, a], -3)


def cat_broadcast_mask(m1, m2, g):
    return torch.where(torch.cat([m1, m2], 0).unsqueeze(-1), g, 0.0).sum(1)


CAT_CASES = [
    pytest.param(cat_chain, lambda: (torch.randn(3, 4), torch.randn(3, 2).t().contiguous().t(), torch.randn(3, 5)), id="chain"),
    pytest.param(cat_into_reductions, lambda: (torch.randn(3, 6), torch.randn(6, 3).t()), id="into-reductions"),
    pytest.param(cat_into_reductions, lambda: (torch.randn(3, 3000), torch.randn(3, 3000)), id="into-long-reductions"),
    pytest.param(
        cat_promotes,
        lambda: (torch.randint(-5, 5, (2, 3), dtype=torch.int8), torch.randn(4, 3) > 0, torch.empty(0)),
        id="promotion-bool-empty",
    ),
    pytest.param(
        cat_of_16_bit_views,
        lambda: (torch.randn(2, 6, 4)[:, ::2].to(torch.bfloat16), torch.randn(2, 5, 4).to(torch.bfloat16)),
        id="bfloat16-non-contiguous",
    ),
    pytest.param(
        cat_broadcast_mask,
        lambda: (torch.rand(2, 3) > 0.5, torch.rand(1, 3) > 0.5, torch.randn(3, 3, 4)),
        id="broadcast-producer",
    ),
]


@pytest.mark.parametrize("static", [True, False], ids=["static", "generic"])
@pytest.mark.parametrize("launch", LAUNCHES)
@pytest.mark.parametrize("fn, make_args", CAT_CASES)
def test_cat_in_a_group(fn, make_args, launch, static, triton_only):
    result = check(fn, *make_args(), compile=triton_only(static_layouts=static, **launch))
    reports = conveyor_triton.reports(result.compiled)
    assert not [f for r in reports for f in r.fallbacks if "cat" in f.target], [str(r) for r in reports]


def test_cat_fuses_with_its_users_not_its_inputs(triton_only):
    def fn(x, y):
        a = x.exp()
        return torch.cat([a, y], 0).sin() + 1, torch.cat([a, a * 2], 1)

    result = check(fn, torch.randn(3, 4), torch.randn(2, 4), compile=triton_only())
    (report,) = conveyor_triton.reports(result.compiled)
    assert not report.fallbacks, str(report)
    (with_cat,) = [k for k in report.kernels if "cat" in k.nodes]
    assert "sin" in with_cat.nodes and "exp" not in with_cat.nodes, str(report)


def test_cat_of_empty_tensors_and_negative_dims(triton_only):
    check(lambda a, b: torch.cat([a, b], -2) + 1, torch.randn(0, 3), torch.randn(0, 3), compile=triton_only())
    check(lambda a, b: torch.cat([a, b], -1) * 2, torch.randn(2, 0), torch.randn(2, 3), compile=triton_only())
    check(lambda a: torch.cat([a], 0) - 1, torch.randn(5), compile=triton_only())


def scans(x, i, m):
    c = x.cumsum(-1)
    return c * 2, c.exp().sum(-1), i.cumsum(1), m.cumsum(-1), x.to(torch.float16).cumsum(-1), x.t().cumsum(1), x.cumsum(0) + 1


@pytest.mark.parametrize("static", [True, False], ids=["static", "generic"])
@pytest.mark.parametrize("launch", LAUNCHES)
@pytest.mark.parametrize("n", [1, 7, 3000], ids=lambda n: f"row{n}")
def test_cumsum_over_the_last_dimension(n, launch, static, triton_only):
    x = torch.randn(5, n)
    i = torch.randint(-100, 100, (5, n), dtype=torch.int8)  # int64 result, as eager
    # a tree scan adds in another order than eager's loop: float tolerance (one
    # float16 ulp near 1); integers are exact
    tol = 2e-3 if n > 100 else 1e-5
    compile = triton_only(static_layouts=static, **launch)
    if torch.get_default_device().type == "cuda":
        # measured on an H100, torch 2.11: eager's CUDA cumsum rounds each partial sum of a
        # float16 row to float16 (n=3000: 0.136 from a float64 reference) where its CPU
        # kernel and conveyor add in float32 (0.031): that output is held to float64
        half = x.to(torch.float16)
        reference = half.double().cumsum(-1)
        err = lambda t: (t.double() - reference).abs().max().item()  # noqa: E731
        assert err(compile(lambda h: h.cumsum(-1))(half)) <= err(half.cumsum(-1))
        result = check(lambda *a: scans(*a)[:4] + scans(*a)[5:], x, i, x > 0, compile=compile, atol=tol, rtol=tol)
    else:
        result = check(scans, x, i, x > 0, compile=compile, atol=tol, rtol=tol)
    reports = conveyor_triton.reports(result.compiled)
    assert not [f for r in reports for f in r.fallbacks if "cumsum" in f.target], [str(r) for r in reports]


def test_cumsum_nan_inf_and_what_stays_aten(triton_only):
    x = torch.randn(3, 9)
    x[0, 2], x[1, 4], x[2, 1] = NAN, float("inf"), float("-inf")
    check(lambda a: a.cumsum(-1) + 0, x, compile=triton_only())
    result = check(lambda a: (a.cumsum(0), a.cumsum(-1, dtype=torch.int32)), x, compile=triton_only())
    check(lambda a: a.cumsum(1) * 2, torch.randn(3, 4, 5), compile=triton_only())
    (report,) = conveyor_triton.reports(result.compiled)
    assert len(report.fallbacks) == 1, str(report)  # float to int


# ---------------------------------------------------------------------------
# Compiled for sm_90 and sm_80 by the real Triton compiler (Note [Ahead-of-time check])

AOT_RUNS = [
    (arg_reductions, lambda: (_args_with_nan_and_ties(),)),
    (arg_reductions, lambda: (_args_with_nan_and_ties(torch.float16),)),
    (arg_reductions, lambda: (torch.randint(-3, 4, (5, 33), dtype=torch.int8),)),
    (lambda a: (a.argmax(-1), a.argmin(0)), lambda: (torch.randn(3, 5000),)),  # looped, outer
    *((case.values[0], case.values[1]) for case in CAT_CASES),
    (scans, lambda: (torch.randn(5, 3000), torch.randint(-9, 9, (5, 3000), dtype=torch.int8), torch.randn(5, 3000) > 0)),
    (scans, lambda: (torch.randn(5, 7), torch.randint(-9, 9, (5, 7), dtype=torch.int8), torch.randn(5, 7) > 0)),
]


@pytest.mark.once  # Note [Tests run once in CI] (conftest.py)
def test_new_kernels_compile_for_sm90_and_sm80():
    from test_triton_aot import _compile_all, _program, _record

    recorder = _record([_program(fn, make_args) for fn, make_args in AOT_RUNS])
    results = _compile_all(recorder)
    names = {launch.name for launch in recorder.launches()}
    assert all(any(op in n for n in names) for op in ("argmax", "argmin", "cat", "cumsum")), names
    assert not aot.errors(results), aot.errors(results)
