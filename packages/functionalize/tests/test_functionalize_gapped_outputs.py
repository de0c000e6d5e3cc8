"""Note [Outputs written into gapped buffers]: a program that writes into a
buffer it made with gaps (``empty_strided`` of a sliced tensor's strides)
returns eager's strides, on both entry points, with and without grad
(``test_exact_stride`` of PyTorch's Inductor tests)."""

from __future__ import annotations

from typing import Any

import conveyor
import pytest
import torch
from conveyor.testing import check


def _written_by_slice(x: torch.Tensor) -> torch.Tensor:
    r = torch.empty_strided(x.size(), x.stride())
    r[:] = x + x
    return r


def _copied(x: torch.Tensor) -> torch.Tensor:
    return torch.empty_strided((16, 8), (17, 2)).copy_(x)


def _filled_then_read(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    r = torch.empty_strided(x.size(), x.stride())
    r.fill_(2)
    return r, r * x


def _dynamo(fn: Any) -> Any:
    torch._dynamo.reset()
    return torch.compile(fn, backend="conveyor")


@pytest.mark.parametrize("compile", [conveyor.compile, _dynamo], ids=["conveyor", "dynamo"])
@pytest.mark.parametrize("fn", [_written_by_slice, _copied, _filled_then_read])
@pytest.mark.parametrize("grad", [False, True])
def test_an_output_written_into_a_gapped_buffer_keeps_its_strides(compile: Any, fn: Any, grad: bool) -> None:
    x = torch.randn(16, 16, requires_grad=grad)[:, :8]  # strides (16, 1): gaps between rows
    check(fn, x if grad else x.detach(), compile=compile)


def test_the_restride_is_planned_only_for_gapped_outputs() -> None:
    # a dense output keeps the functional graph's layout, with no copy at run time
    compiled = conveyor.compile(lambda x: torch.empty_like(x).copy_(x * 2))
    x = torch.randn(4, 6).t()
    check(lambda x: torch.empty_like(x).copy_(x * 2), x, compile=lambda f: compiled)
    assert compiled(x).stride() == torch.empty_like(x).stride()
