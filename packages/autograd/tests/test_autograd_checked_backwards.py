"""Ops whose eager backward checks its gradient run eagerly when they need
gradients (Note [Backwards that check their gradient]): eager's error is kept,
and a well-defined loss gets eager's gradient."""

from __future__ import annotations

import warnings

import pytest
import torch
from autograd_helpers import pipeline
from conveyor.testing import check

FALLBACK = "conveyor: running .* eagerly: eager's backward of aten._?linalg_(eig|eigh|svd)"


def _phase_dependent(a):
    return torch.linalg.eig(a)[1].imag.sum()  # depends on the eigenvectors' phase: ill-defined


def test_phase_dependent_eig_loss_raises_as_in_eager() -> None:
    a = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
    with pytest.raises(RuntimeError, match="linalg_eig_backward") as eager_exc:
        _phase_dependent(a).backward()
    with pytest.warns(UserWarning, match=FALLBACK):
        out = pipeline()(_phase_dependent)(a)
    with pytest.raises(RuntimeError) as compiled_exc:
        out.backward()
    assert str(compiled_exc.value).splitlines()[0] == str(eager_exc.value).splitlines()[0]


@pytest.mark.parametrize(
    ("fn", "dtype"),
    [
        (lambda a: (torch.linalg.eig(a)[0].abs().sum(),), torch.float64),
        (lambda a: (torch.linalg.eigvals(a).real,), torch.float64),
        (lambda a: ((torch.linalg.eigh(a + a.mT.conj())[1].abs() ** 2).sum(),), torch.complex128),
        (lambda a: (torch.linalg.svd(a)[0].abs().sum(),), torch.complex128),
    ],
    ids=["eig_values", "eigvals", "eigh_complex", "svd_complex"],
)
def test_well_defined_losses_get_eagers_gradient(fn, dtype) -> None:
    a = torch.randn(3, 3, dtype=dtype, requires_grad=True)
    with pytest.warns(UserWarning, match=FALLBACK):
        check(fn, a, compile=pipeline())


def test_real_svd_and_inference_compile() -> None:
    a = torch.randn(3, 3, dtype=torch.float64, requires_grad=True)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="conveyor: running")
        check(lambda a: (torch.linalg.svd(a)[1].sum(),), a, compile=pipeline())
        with torch.no_grad():
            check(lambda a: (torch.linalg.eig(a)[0],), a, compile=pipeline())

