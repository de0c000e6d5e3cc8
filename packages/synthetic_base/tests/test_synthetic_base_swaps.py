"""Note [Storage swaps of inputs sharing a storage]: a ``set_`` of an input the
stage would merge into a synthetic base runs eagerly, with a warning, and
matches eager (h_fuzz2's B14: ``a.set_()`` gave a raw RuntimeError from
``slice_scatter``)."""

from __future__ import annotations

import warnings
from typing import Any

import conveyor
import pytest
import torch
from conveyor.testing import check


def set_empty_no_grad(a, b):
    with torch.no_grad():
        a.set_()
    return a * 1, b * 1


def set_other_shape_no_grad(a, b):
    with torch.no_grad():
        a.set_(torch.zeros(5, dtype=a.dtype))
    return a * 1, b * 1


def _overlapping(requires_grad: bool) -> list[torch.Tensor]:
    r = torch.randn(4, 3, dtype=torch.float64, requires_grad=requires_grad) * 1
    return [r.view(-1)[3:6].view(1, 3), r.view(-1)[2:6].view(2, 2)]


@pytest.mark.parametrize("requires_grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize("program", [set_empty_no_grad, set_other_shape_no_grad], ids=lambda p: p.__name__)
def test_a_swap_of_a_merged_input_runs_eagerly(program: Any, requires_grad: bool) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check(program, *_overlapping(requires_grad), compile=conveyor.compile)
    # merged here, or (not merged) functionalize's Note [Storage swaps functionalization cannot replay]
    assert any("Note [Storage swaps" in str(w.message) for w in caught)
