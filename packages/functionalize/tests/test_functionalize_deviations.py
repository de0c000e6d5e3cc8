"""Documented deviations from eager, where eager's own result is wrong.

``torch.as_strided_scatter``'s derivative in torch 2.13 gives ``self`` the
gradient inside the scattered window and zero outside; the functional graph
spells the op as an ``index_put`` into ``self``'s buffer (decompositions.py),
whose gradient passes ``gradcheck``. Eager's fails it."""

from __future__ import annotations

import pytest
import torch
from test_functionalize_catalogue import compile_eager
from torch.autograd.gradcheck import GradcheckError


def _scatter(s, src):
    return torch.as_strided_scatter(s, src, (2,), (2,), 1) * torch.arange(1.0, 7.0, dtype=s.dtype).view(2, 3)


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    return (
        torch.randn(2, 3, dtype=torch.float64, requires_grad=True),
        torch.randn(2, dtype=torch.float64, requires_grad=True),
    )


def test_eagers_as_strided_scatter_gradient_fails_gradcheck() -> None:
    # the reason for the deviation: if torch fixes its formula, this fails and the deviation goes
    with pytest.raises(GradcheckError, match="Jacobian mismatch for output 0 with respect to input 0"):
        torch.autograd.gradcheck(_scatter, _inputs())


def test_compiled_as_strided_scatter_gradient_passes_gradcheck() -> None:
    compiled = compile_eager(_scatter)
    assert torch.autograd.gradcheck(lambda *a: compiled(*a), _inputs())


def test_compiled_as_strided_scatter_values_and_src_gradient_match_eager() -> None:
    s, src = _inputs()
    eager = _scatter(s, src)
    eager.sum().backward()
    s2, src2 = s.detach().clone().requires_grad_(), src.detach().clone().requires_grad_()
    out = compile_eager(_scatter)(s2, src2)
    out.sum().backward()
    torch.testing.assert_close(out, eager)
    torch.testing.assert_close(src2.grad, src.grad)
    window = torch.zeros(6, dtype=torch.bool)
    window[[1, 3]] = True  # storage offset 1, stride 2
    expected = torch.arange(1.0, 7.0, dtype=torch.float64).masked_fill(window, 0).view(2, 3)
    torch.testing.assert_close(s2.grad, expected)  # the true gradient: zero inside the window
