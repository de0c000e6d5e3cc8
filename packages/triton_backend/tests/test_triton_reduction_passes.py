"""Several reductions in one pass over rows longer than a persistent tile
(Note [Reduction passes] in ``conveyor_triton.codegen_reduce``), against
eager (``conveyor.testing.check``): independent reductions share a loop, a
variance about a mean of the same pass is folded by Welford's update, a
softmax's sum by an online max."""

from __future__ import annotations

import conveyor_triton
import pytest
import torch
import torch.nn.functional as F
from conveyor.testing import check

N = 8192  # past a persistent tile in the interpreter (2048) and on a GPU (4096)


def softmax(x):
    return torch.softmax(x, -1), torch.log_softmax(x, -1)


def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b)


def var_mean(x):
    return torch.var_mean(x, -1), x.var(-1, correction=0), x.std(-1)


def independent(x, y):
    return x.sum(-1), x.amax(-1), x.amin(-1), (x * y).sum(-1), x.argmax(-1)


def residual_norm(x, r, w):
    h = x + r  # the value the mean and the variance read is computed in the loop
    return F.layer_norm(h, (h.shape[-1],), w), torch.softmax(h * 0.5, -1)


def squares_about_max(x):
    # a variance-like sum about another row value than the mean: Welford's M2 + n * (mean - c) ** 2
    low = x.amin(-1, keepdim=True)
    d = x - x.mean(-1, keepdim=True)
    return ((x - x.amax(-1, keepdim=True)) ** 2).sum(-1), ((x - low) * (x - low)).sum(-1), (d * d).sum(-1)


def _masked(n: int) -> torch.Tensor:
    x = torch.randn(4, n)
    x[0, n // 2 :] = float("-inf")  # a causal mask's row
    x[1, :] = float("-inf")  # every element masked: NaN, as eager
    x[2, 5] = float("nan")
    x[3, n - 1] = float("inf")
    return x


CASES = [
    (softmax, lambda: (torch.randn(3, N) * 4,)),
    (softmax, lambda: (_masked(N),)),
    (layer_norm, lambda: (torch.randn(2, 3, N) * 3 + 100, torch.randn(N), torch.randn(N))),
    (var_mean, lambda: (torch.randn(5, N) + 1000,)),
    (independent, lambda: (torch.randn(3, N), torch.randn(3, N))),
    (residual_norm, lambda: (torch.randn(2, N), torch.randn(2, N), torch.randn(N))),
    (squares_about_max, lambda: (torch.randn(3, N),)),
]


@pytest.mark.parametrize("launch_for", [None, "cuda"])
@pytest.mark.parametrize("fn, make_args", CASES, ids=[f"{c[0].__name__}-{i}" for i, c in enumerate(CASES)])
def test_long_rows_match_eager(fn, make_args, launch_for, triton_only):
    torch.manual_seed(0)
    options = {"launch_for": launch_for} if launch_for else {}
    check(fn, *make_args(), compile=triton_only(**options), atol=1e-4, rtol=1e-5)


def test_half_precision_layer_norm_and_softmax(triton_only):
    torch.manual_seed(0)
    x, w = torch.randn(3, N).to(torch.float16), torch.randn(N).to(torch.float16)
    check(lambda x, w: (F.layer_norm(x, (N,), w), torch.softmax(x, -1)), x, w, compile=triton_only(), atol=2e-2, rtol=2e-2)


def test_empty_rows_sum_to_zero(triton_only):
    check(lambda x: (x * x - x.mean(-1, keepdim=True)).sum(-1), torch.randn(3, 0), compile=triton_only())


def _sources(compiled) -> list[str]:
    (prog,) = conveyor_triton.programs(compiled)
    return [step.kernel.source for step in prog.kernels]


@pytest.mark.parametrize(
    "fn, make_args, loops",
    [
        (lambda x: torch.softmax(x, -1), lambda: (torch.randn(2, N),), 2),  # max and sum, then the stores
        (layer_norm, lambda: (torch.randn(2, N), torch.randn(N), torch.randn(N)), 2),  # mean and variance, stores
        (lambda x: torch.var_mean(x, -1), lambda: (torch.randn(2, N),), 1),
        (lambda x: (x.sum(-1), x.amax(-1), x.argmin(-1)), lambda: (torch.randn(2, N),), 1),
    ],
)
def test_one_pass_reads_the_row_once(fn, make_args, loops, triton_only):
    compiled = triton_only(launch_for="cuda")(fn)
    compiled(*make_args())
    (source,) = _sources(compiled)
    assert source.count("for r0 in range") == loops, source
    assert source.count("tl.load(in0 ") == loops, source  # each loop reads the input once


def test_a_reduction_of_a_reduction_still_runs_after_it(triton_only):
    # the sum reads the max through something else than x - max: a later pass
    fn = lambda x: (x / x.amax(-1, keepdim=True)).sum(-1)  # noqa: E731
    compiled = triton_only(launch_for="cuda")(fn)
    check(fn, torch.rand(2, N) + 0.5, compile=triton_only(launch_for="cuda"))
    compiled(torch.rand(2, N))
    (source,) = _sources(compiled)
    assert source.count("for r0 in range") == 2
