"""Symbolically sized graphs (Note [Symbolic sizes in the triton backend])."""

from __future__ import annotations

import conveyor
import conveyor_triton
import torch
from conveyor.testing import check


def chain(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return (x * y + x).sigmoid().tanh()


def test_a_symbolic_graph_runs_kernels_for_every_size() -> None:
    compiled = conveyor.compile(chain, backend="triton", dynamic=True)
    sources = set()
    for n in (3, 5, 9):
        x, y = torch.randn(n, 4), torch.randn(n, 4)
        torch.testing.assert_close(compiled(x, y), chain(x, y))
        (report,) = conveyor_triton.reports(compiled)
        assert report.kernels and not report.fallbacks, str(report)
        sources.add(report.sources())
    assert compiled.compiles == 1  # the pipeline ran once; the backend specialized per size
    assert len(sources) == 1  # and every size loaded the same kernels


def test_automatic_dynamic_keeps_kernels_after_a_size_change() -> None:
    compiled = conveyor.compile(chain, backend="triton")
    compiled(torch.randn(3, 4), torch.randn(3, 4))
    (first,) = conveyor_triton.reports(compiled)
    check(chain, torch.randn(7, 2), torch.randn(7, 2), compile=lambda f: compiled)
    (second,) = conveyor_triton.reports(compiled)
    check(chain, torch.randn(5, 3), torch.randn(5, 3), compile=lambda f: compiled)
    (third,) = conveyor_triton.reports(compiled)
    # the first program's kernels are static (sizes in the source); once the sizes are
    # symbolic every size shares the generic kernels (Note [Static layouts])
    assert "xnumel = 12" in first.sources() and second.kernels and second.sources() == third.sources()


def mlp(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
    return torch.tanh(x @ w1) @ w2


def test_symbolic_training_with_the_autograd_stage() -> None:
    compiled = conveyor.compile(mlp, backend="triton", dynamic=True)
    w1, w2 = torch.randn(4, 8, requires_grad=True), torch.randn(8, 2, requires_grad=True)
    for n in (2, 5):
        check(mlp, torch.randn(n, 4), w1, w2, compile=lambda f: compiled, atol=1e-5, rtol=1e-4)
    assert compiled.compiles == 1
    assert any(r.kernels for r in conveyor_triton.reports(compiled))


def test_dynamic_with_a_sparse_input_runs() -> None:
    # sparse inputs keep static sizes today; the per-size key must still not ask them for strides
    def spmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.sparse.mm(a, b).relu()

    compiled = conveyor.compile(spmm, backend="triton", dynamic=True)
    for n in (3, 5):
        a, b = torch.randn(n, 4).relu().to_sparse(), torch.randn(4, 2)
        torch.testing.assert_close(compiled(a, b), spmm(a, b))
