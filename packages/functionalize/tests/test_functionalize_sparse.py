"""Sparse tensors through the pipeline: sparse compressed (CSR/CSC/BSR/BSC)
tensors that require grad run eagerly with a warning (torch 2.13 aborts the
process when it wraps one for functionalization: Note [Sparse compressed
inputs that require grad]); without grad, and sparse COO, they compile."""

from __future__ import annotations

import warnings

import pytest
import torch
from conveyor.testing import check
from test_functionalize_catalogue import compile_eager

FALLBACK = "conveyor: running .* eagerly: .*sparse compressed"


def _sparse(layout: torch.layout, requires_grad: bool) -> torch.Tensor:
    dense = torch.randn(4, 4, dtype=torch.float64) * (torch.rand(4, 4) > 0.5)
    if layout is torch.sparse_coo:
        s = dense.to_sparse()
    elif layout is torch.sparse_bsr:
        s = dense.to_sparse_bsr((2, 2))
    else:
        s = dense.to_sparse(layout=layout)
    return s.requires_grad_(requires_grad)


def _mm(s, w):
    return (torch.sparse.mm(s, w) * 2,)


@pytest.mark.filterwarnings("ignore:Sparse (CSR|CSC|BSR) tensor support is in beta")
@pytest.mark.parametrize("layout", [torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr], ids=str)
def test_sparse_compressed_input_with_grad_runs_eagerly(layout: torch.layout) -> None:
    w = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    fn = _mm if layout is torch.sparse_csr else lambda s, w: (s.to_dense() @ w,)
    with pytest.warns(UserWarning, match=FALLBACK):
        check(fn, _sparse(layout, True), w, compile=compile_eager)


@pytest.mark.filterwarnings("ignore:Sparse (CSR|CSC|BSR) tensor support is in beta")
@pytest.mark.parametrize("layout", [torch.sparse_csr, torch.sparse_coo], ids=str)
def test_sparse_input_without_grad_compiles(layout: torch.layout) -> None:
    w = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="conveyor: running")
        check(_mm, _sparse(layout, False), w, compile=compile_eager)


def test_sparse_coo_input_with_grad_compiles() -> None:
    w = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="conveyor: running")
        check(_mm, _sparse(torch.sparse_coo, True), w, compile=compile_eager)


@pytest.mark.filterwarnings("ignore:Sparse (CSR|CSC|BSR) tensor support is in beta")
@pytest.mark.parametrize(
    "make",
    [lambda d: d.to_sparse_csr(), lambda d: d.to_sparse(layout=torch.sparse_csc), lambda d: d.to_sparse_bsr((2, 2))],
    ids=["to_sparse_csr", "to_sparse_csc", "to_sparse_bsr"],
)
def test_sparse_compressed_made_from_an_input_with_grad_runs_eagerly(make) -> None:
    def fn(d, w):
        return ((make(d) * 2).to_dense() @ w,)

    d = torch.randn(4, 4, dtype=torch.float64, requires_grad=True)
    w = torch.randn(4, 3, dtype=torch.float64, requires_grad=True)
    with pytest.warns(UserWarning, match=FALLBACK):
        check(fn, d, w, compile=compile_eager)
