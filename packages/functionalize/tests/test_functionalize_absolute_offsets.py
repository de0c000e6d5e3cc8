"""Note [Storage offsets functionalization cannot replay]: a program that
writes and takes an ``as_strided`` (or ``resize_``) of a tensor laid out in part of its
storage runs eagerly, with a warning, and gives eager's results (found by
the random-program fuzzer: the inductor backend read and wrote outside the
tensor, the eager backend raised); on a tensor that is its storage it
compiles."""

from __future__ import annotations

import warnings
from typing import Any

import conveyor
import pytest
import torch
from conveyor.testing import check


def _written_then_restrided(x: torch.Tensor) -> torch.Tensor:
    x.add_(1)
    x.as_strided_((1,), (1,), 3)
    return x * 1


def _written_then_viewed(x: torch.Tensor) -> torch.Tensor:
    x.mul_(2)
    return x.as_strided((2,), (1,), 3) + 1


def _view_written(x: torch.Tensor) -> torch.Tensor:
    x.as_strided((1,), (1,), 4).add_(1)
    return x * 1


def _written_then_resized(x: torch.Tensor) -> torch.Tensor:
    x.mul_(2)
    with torch.no_grad():
        x.resize_(6)  # the storage's first 6 elements, not x's
    return x * 1


def _resized_self_overlapping(b: torch.Tensor) -> tuple[()]:
    with torch.no_grad():
        b.resize_(2)  # keeps b's storage offset
    return ()


def _resized_then_written(a: torch.Tensor, c: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    with torch.no_grad():
        c.resize_(2)
    c[1].mul_(3)
    return a * 1, c * 1


@pytest.mark.parametrize("backend", ["eager", "inductor"])
@pytest.mark.parametrize(
    ("fn", "layouts"),
    [
        (_written_then_resized, [((7,), (2,), 0)]),
        (_resized_self_overlapping, [((3,), (0,), 7)]),
        (_resized_then_written, [((4,), (1,), 12), ((3,), (5,), 4)]),  # c overlaps a
    ],
)
def test_a_resize_of_part_of_a_storage_runs_eagerly(fn: Any, layouts: Any, backend: str) -> None:
    root = torch.arange(16, dtype=torch.float64)
    inputs = [root.as_strided(*layout) for layout in layouts]
    with pytest.warns(UserWarning, match="Storage offsets functionalization cannot replay"):
        check(fn, *inputs, compile=lambda f: conveyor.compile(f, backend=backend))


@pytest.mark.parametrize("backend", ["eager", "inductor"])
@pytest.mark.parametrize("fn", [_written_then_restrided, _written_then_viewed, _view_written])
def test_an_as_strided_of_part_of_a_storage_in_a_program_that_writes_runs_eagerly(fn: Any, backend: str) -> None:
    root = torch.arange(12, dtype=torch.float64)
    with pytest.warns(UserWarning, match="Storage offsets functionalization cannot replay"):
        check(fn, root.as_strided((2,), (1,), 3), compile=lambda f: conveyor.compile(f, backend=backend))


def test_an_as_strided_of_a_whole_storage_compiles() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        x.add_(1)
        x.as_strided_((2,), (1,), 2)
        return x * 1

    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        check(fn, torch.arange(4, dtype=torch.float64), compile=conveyor.compile)
