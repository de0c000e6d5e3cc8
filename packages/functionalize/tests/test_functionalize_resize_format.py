"""``resize_`` into a memory format runs eagerly, with a warning (Note [Resizes
into a memory format]); without one it compiles."""

from __future__ import annotations

import warnings

import pytest
import torch
from conveyor.testing import check
from test_functionalize_catalogue import compile_eager


def test_resize_into_a_memory_format() -> None:
    """test_view_ops.py's test_memory_format_resize_: the input came back contiguous."""

    def fn(flat):
        flat.resize_((2, 3, 2, 2), memory_format=torch.channels_last)
        return flat.sum()

    with pytest.warns(UserWarning, match="conveyor: running .* eagerly: .*Resizes into a memory format"):
        check(fn, torch.randn(24), compile=compile_eager)


def test_resize_into_a_3d_memory_format_returned() -> None:
    def fn(flat):
        return flat.resize_((2, 3, 2, 2, 2), memory_format=torch.channels_last_3d)

    with pytest.warns(UserWarning, match="Resizes into a memory format"):
        check(fn, torch.randn(48), compile=compile_eager)


@pytest.mark.parametrize("fmt", [None, torch.contiguous_format])
def test_resize_without_a_memory_format_compiles(fmt: torch.memory_format | None) -> None:
    def fn(flat):
        flat.resize_((2, 3, 2, 2), memory_format=fmt) if fmt is not None else flat.resize_((2, 3, 2, 2))
        return flat * 2

    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="conveyor:")
        check(fn, torch.randn(24), compile=compile_eager)


def _roomy(room: int, *size: int) -> torch.Tensor:
    """A tensor of ``size`` whose storage holds ``room`` known values."""
    return torch.arange(float(room)).resize_(*size)


def test_resize_as_growing_an_input_within_its_storage() -> None:
    """test_misc.py's test_inplace_view_on_graph_input (resize_as_): eager shows the
    storage's values past the old size, the functional resize_as fresh memory (Note
    [resize_as_ that grows a tensor])."""

    def fn(x):
        x.resize_as_(torch.empty(4, 3))
        return x * 2

    with pytest.warns(UserWarning, match="resize_as_ that grows a tensor"):
        check(fn, _roomy(12, 2, 3), compile=compile_eager)


def test_resize_as_growing_an_intermediate_again() -> None:
    """Shrunk, then grown back within its storage: the epilogue raised a shape mismatch."""

    def fn(x):
        y = x.clone()
        y.resize_(2)
        y.resize_as_(x)
        return y * 2

    with pytest.warns(UserWarning, match="resize_as_ that grows a tensor"):
        check(fn, torch.randn(2, 3), compile=compile_eager)


def test_resize_as_shrinking_compiles() -> None:
    def fn(x):
        x.resize_as_(torch.empty(1, 3))
        return x * 2

    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="conveyor:")
        check(fn, torch.randn(2, 3), compile=compile_eager)
