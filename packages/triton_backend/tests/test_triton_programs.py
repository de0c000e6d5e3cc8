"""Programs through the triton backend alone, against eager (``conveyor.testing.check``)."""

from __future__ import annotations

import conveyor_triton
import pytest
import torch
import torch.nn.functional as F
from conveyor.testing import check


def pointwise_chain(x, y):
    return (x * y + 1).sigmoid() * torch.tanh(x) - y.exp() / 3


def broadcast(x, b):
    return torch.relu(x + b) * b.unsqueeze(0), (x > 0.5).sum(-1)


def non_contiguous(x):
    return x.t() * 2 + x.t().sin(), x[:, ::2].cos()


def softmax(x):
    return torch.softmax(x, -1), torch.log_softmax(x, 1)


def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b)


def reductions(x):
    return x.sum(), x.mean(0), x.amax(-1, keepdim=True), x.amin((0, 1)), x.var(-1), torch.var_mean(x, 0)


def views_and_outputs(x):
    y = x * 2
    return y, y.view(-1), y.t(), (y + 1).reshape(x.shape[1], x.shape[0])


def where_and_compare(x, y):
    return torch.where(x > y, x, y * 2), (x == y) | (x < 0), torch.maximum(x, y), torch.clamp(x, -0.5, 0.5)


def int_and_bool(a, m):
    return a * 3 + 1, a.sum(0), ~m, m.logical_and(a > 2), (a // 1).to(torch.float32) / 2


def size_edges(x0, x1):
    return x0 * 2, x0.sum(-1), x1.exp(), x1.sum(0), torch.softmax(x1, -1)


def fallback_matmul(x, w):
    return F.gelu(x @ w + 1).sum(-1)


def writes(x, y):
    z = x * 2
    z.add_(y)
    return z.sin(), x.cos()


def column_reductions(x, g, w):
    """Reductions over leading dimensions with their pointwise producers (norm
    weight and bias gradients): permuted groups."""
    xhat = (x - x.mean(0, keepdim=True)) * w
    return (g * xhat).sum((0, 1)), g.sum((0, 1)), (xhat * xhat).sum(0), (x[0].t() + 1).amax(0)


def row_values(x, r):
    return x * (r / 4), (r * 2).exp()


def broadcast_producers(g, idx):
    """A small mask (``eq``) feeding a larger ``where``: recomputed per element."""
    mask = idx.unsqueeze(-1) == torch.arange(3).view(3, 1, 1)
    return torch.where(mask, g, 0.0).sum(1), (idx * 2).unsqueeze(-1) + g


def scalar_constants(x):
    return torch.full_like(x, 2.5) * x, torch.zeros_like(x) + 1, x.new_ones(()) + x


CASES = [
    (pointwise_chain, lambda: (torch.randn(5, 7), torch.randn(5, 7))),
    (broadcast, lambda: (torch.rand(6, 9), torch.rand(9))),
    (non_contiguous, lambda: (torch.randn(8, 6),)),
    (softmax, lambda: (torch.randn(6, 33) * 4,)),
    (softmax, lambda: (torch.randn(3, 2100),)),  # rows longer than one block: looped reductions
    (layer_norm, lambda: (torch.randn(2, 5, 16), torch.randn(16), torch.randn(16))),
    (reductions, lambda: (torch.randn(4, 6, 5),)),
    (views_and_outputs, lambda: (torch.randn(3, 4),)),
    (where_and_compare, lambda: (torch.randn(4, 5), torch.randn(4, 5))),
    (int_and_bool, lambda: (torch.randint(-5, 5, (4, 6), dtype=torch.int32), torch.rand(4, 6) > 0.5)),
    (size_edges, lambda: (torch.randn(0, 4), torch.randn(1, 1))),
    (fallback_matmul, lambda: (torch.randn(4, 8), torch.randn(8, 3))),
    (writes, lambda: (torch.randn(4, 4), torch.randn(4, 4))),
    (scalar_constants, lambda: (torch.randn(3, 3),)),
    (column_reductions, lambda: (torch.randn(3, 4, 6), torch.randn(3, 4, 6), torch.randn(6))),
    (row_values, lambda: (torch.randn(5, 8), torch.randn(5, 1))),
    (broadcast_producers, lambda: (torch.randn(3, 4, 6), torch.randint(0, 3, (4,)))),
]


@pytest.mark.parametrize("fn, make_args", CASES, ids=[f"{c[0].__name__}-{i}" for i, c in enumerate(CASES)])
def test_program_matches_eager(fn, make_args, triton_only):
    torch.manual_seed(0)
    check(fn, *make_args(), compile=triton_only())


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precision_blocks(dtype, triton_only):
    torch.manual_seed(0)
    x, w, b = torch.randn(4, 32).to(dtype), torch.randn(32).to(dtype), torch.randn(32).to(dtype)

    def block(x, w, b):
        y = F.layer_norm(x, (32,), w, b)
        return torch.softmax(y, -1), F.gelu(y), (x * w).sum(-1)

    check(block, x, w, b, compile=triton_only(), atol=2e-2, rtol=2e-2)


def _bf16_roundings(x, h):
    y = (x * 1.0).to(torch.bfloat16)  # an explicit conversion: rounds inside the kernel
    return y, (y.float() * 3).to(torch.bfloat16) + h  # a stored bfloat16 result: rounds at the store


def test_bfloat16_rounds_to_nearest_even_as_eager(triton_only):
    # regression: Triton's interpreter truncates float32 -> bfloat16, so about
    # half of the values came out one ulp off eager (Note [bfloat16 rounding
    # in the interpreter]), and its bfloat16 -> float32 conversion gets
    # subnormals wrong; now bit for bit, ties, NaN, inf and subnormals included
    special = torch.tensor([float("inf"), float("-inf"), float("nan"), 3.3895e38, 1e-40, -1e-40, -0.0])
    ties = torch.tensor([0x3F808000, 0x3F818000, 0x3F80C000, 0x3F818001], dtype=torch.int64).to(torch.int32).view(torch.float32)
    x = torch.cat([torch.randn(4096), special, ties, -ties])
    h = torch.cat([special, torch.randn(x.numel() - special.numel())]).to(torch.bfloat16)  # loaded subnormals too
    check(_bf16_roundings, x, h, compile=triton_only(), atol=0, rtol=0)


def test_a_kernel_that_rounds_explicitly_is_compiled_without_contraction(triton_only, monkeypatch):
    # Note [Explicit roundings and FMA]: on a GPU, (y * 3).to(bfloat16) + h became one fma.rn.bf16;
    # the kernels are generated as for a GPU (the interpreter's roundings are integer arithmetic)
    monkeypatch.setattr(conveyor_triton.dtypes, "interpreting", lambda: False)
    compiled = triton_only()(_bf16_roundings)
    compiled(torch.randn(64), torch.randn(64).to(torch.bfloat16))
    (prog,) = conveyor_triton.programs(compiled)
    assert [k.kernel.launch.meta.get("enable_fp_fusion", True) for k in prog.kernels] == [False]
    plain = triton_only()(lambda x, y: x * 3 + y)
    plain(torch.randn(64), torch.randn(64))
    (prog,) = conveyor_triton.programs(plain)
    assert all(k.kernel.launch.fp_fusion for k in prog.kernels)


def test_fusion_groups(triton_only):
    """Layer norm, softmax and GELU over the same rows make one kernel."""

    def block(x, w, b):
        y = F.layer_norm(x, (16,), w, b)
        return torch.softmax(y, -1) + F.gelu(y)

    result = check(block, torch.randn(8, 16), torch.randn(16), torch.randn(16), compile=triton_only())
    (report,) = conveyor_triton.reports(result.compiled)
    assert len(report.kernels) == 1, str(report)
    assert report.kernels[0].kind == "reduction"
    assert not report.fallbacks
    assert "@triton.jit" in report.sources()


def test_column_reductions_fuse_with_their_producers(triton_only):
    def grads(g, xhat):
        return (g * xhat).sum((0, 1)), g.sum((0, 1))

    result = check(grads, torch.randn(3, 4, 6), torch.randn(3, 4, 6), compile=triton_only())
    (report,) = conveyor_triton.reports(result.compiled)
    assert len(report.kernels) == 1, str(report)


def test_fallbacks_are_reported(triton_only):
    result = check(fallback_matmul, torch.randn(4, 8), torch.randn(8, 3), compile=triton_only())
    (report,) = conveyor_triton.reports(result.compiled)
    assert [f.target for f in report.fallbacks] == ["aten.mm.default"], str(report)
    assert "aten.mm.default" in str(report)


def test_writes_keep_memory_order(triton_only):
    """``x.cos()`` does not touch what ``add_`` writes, so it shares a kernel
    with ``x * 2`` across the write; ``z.sin()`` reads it, so it runs after."""
    result = check(writes, torch.randn(4, 4), torch.randn(4, 4), compile=triton_only())
    (report,) = conveyor_triton.reports(result.compiled)
    assert [f.target for f in report.fallbacks] == ["aten.add_.Tensor"], str(report)
    assert any("writes to tensors" in n for n in report.notes)
    assert len(report.kernels) == 2, str(report)


def mutations(a, b, v):
    """Inputs written, read before and after, through views; aliasing inputs."""
    s = a.sin()
    a.mul_(2)
    t = a.cos() + s
    v[0].add_(1)
    return t, b * 3, v.sum(-1), a.exp()


@pytest.mark.parametrize("alias", [False, True])
def test_mutations_match_eager(alias, triton_only):
    a = torch.randn(3, 4)
    v = torch.randn(2, 4)
    b = a[1] if alias else torch.randn(4)
    check(mutations, a, b, v, compile=triton_only())


def test_inputs_requiring_grad_need_autograd_stage(triton_only):
    compiled = triton_only()(lambda x: x.sin())
    with pytest.raises(RuntimeError, match="enable the autograd stage"):
        compiled(torch.randn(3, requires_grad=True))
    with torch.no_grad():
        check(lambda x: x.sin(), torch.randn(3, requires_grad=True), compile=triton_only(), check_grads=False)


def test_views_of_inputs_requiring_grad_need_no_kernel(triton_only):
    # the autograd stage hands on a graph of views as it is: aten views record
    # autograd history, so it runs (before, the backend refused it)
    x = torch.randn(3, 4, requires_grad=True)
    result = check(lambda t: (t.flatten(), *torch.hsplit(t, 2)), x, compile=triton_only())
    (report,) = conveyor_triton.reports(result.compiled)
    assert not report.kernels


def test_new_static_sizes_get_static_kernels_and_share_generic_ones(triton_only):
    # Note [Static layouts]: sizes are constants of a static kernel, arguments of a generic one
    compiled = triton_only()(pointwise_chain)
    compiled(torch.randn(3, 4), torch.randn(3, 4))
    (first,) = conveyor_triton.programs(compiled)
    compiled(torch.randn(7, 2), torch.randn(7, 2))
    (second,) = conveyor_triton.programs(compiled)
    assert first is not second
    assert [k.kernel.source for k in first.kernels] != [k.kernel.source for k in second.kernels]
    assert [k.sources["generic"].source for k in first.kernels] == [k.sources["generic"].source for k in second.kernels]


GPU_LAUNCH_CASES = [
    *CASES,
    (softmax, lambda: (torch.randn(3, 5000),)),  # a row past one persistent tile: looped on a GPU
    (lambda x: x.sum(0), lambda: (torch.randn(50, 70),)),  # an outer (column) reduction, persistent
    (lambda x: (x * 2).sum(0), lambda: (torch.randn(300, 70),)),  # an outer reduction that loops
    # Note [Split reductions]: few long rows run as two kernels on a GPU
    (lambda x: (x.sum(-1), x.amax(-1), x.amin(-1)), lambda: (torch.randn(4, 5000),)),
    (lambda x: x.amax(-1), lambda: (torch.randn(3, 5000).index_fill(1, torch.tensor([4100]), float("nan")),)),
    (lambda x: (x * x).sum(), lambda: (torch.randn(5000),)),
    (lambda x: (x.sum(0), (x * 3).amax(0)), lambda: (torch.randn(3000, 16),)),  # outer
    (lambda x: x.sum(-1), lambda: (torch.randint(-100, 100, (2, 5000), dtype=torch.int32),)),
    # sums over no elements are 0 (a linear layer's bias gradient for an empty batch)
    (lambda x: ((x * 2).sum(0), x.sum(-1)), lambda: (torch.randn(0, 5),)),
    (lambda x: (x + 1).sum(-1), lambda: (torch.randn(3, 0),)),
]


@pytest.mark.parametrize("fn, make_args", GPU_LAUNCH_CASES)
def test_program_matches_eager_with_gpu_launches(fn, make_args, triton_only):
    # Note [Launch configuration]: the kernels, block sizes and persistence a GPU would run, in the interpreter
    torch.manual_seed(0)
    check(fn, *make_args(), compile=triton_only(launch_for="cuda"), atol=1e-4, rtol=1e-5)


def test_few_long_rows_are_split_reductions_on_a_gpu(triton_only):
    compiled = triton_only(launch_for="cuda")(lambda x: (x.sum(-1), x.amax(-1)))
    compiled(torch.randn(4, 5000))
    (prog,) = conveyor_triton.programs(compiled)
    (step,) = prog.kernels
    assert step.kernel.launch.split == 3 and "combine" in step.sources
    if torch.get_default_device().type == "cpu":  # CONVEYOR_TEST_DEVICE=cuda: launches are a GPU's anyway
        # launches for the interpreter by name: ``--aot-check`` sets $CONVEYOR_TRITON_LAUNCH_FOR to cuda
        here = triton_only(launch_for="cpu")(lambda x: (x.sum(-1), x.amax(-1)))
        here(torch.randn(4, 5000))
        (prog,) = conveyor_triton.programs(here)
        assert all("combine" not in s.sources for s in prog.kernels)  # the interpreter runs one kernel
