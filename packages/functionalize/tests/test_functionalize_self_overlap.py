"""Writes through an input whose elements share memory run eagerly, with a
warning (Note [Writes through a self-overlapping input]); reads compile."""

from __future__ import annotations

import itertools
import warnings

import pytest
import torch
from conveyor.testing import check
from conveyor_functionalize.self_overlap import overlaps_itself
from test_functionalize_catalogue import compile_eager

FALLBACK = "conveyor: running .* eagerly: it writes through input"


def _stride0(requires_grad: bool) -> torch.Tensor:
    base = torch.randn(2, 2, dtype=torch.float64, requires_grad=requires_grad)
    return (base * 1 if requires_grad else base).as_strided((2,), (0,), 0)


@pytest.mark.parametrize("requires_grad", [False, True], ids=["plain", "grad"])
def test_write_one_element_of_a_stride0_input(requires_grad: bool) -> None:
    def fn(x0):
        x0[0].zero_()
        return (x0,)

    with pytest.warns(UserWarning, match=FALLBACK):
        check(fn, _stride0(requires_grad), compile=compile_eager)


def test_write_then_read_the_shared_element() -> None:
    def fn(x0):
        x0[0].add_(1)
        return (x0 * 2,)  # eager reads the write through both elements

    with pytest.warns(UserWarning, match=FALLBACK):
        check(fn, _stride0(False), compile=compile_eager)


def test_a_write_eager_refuses_is_refused() -> None:
    def fn(x0):
        return (x0.add_(1),)  # "more than one element ... refers to a single memory location"

    with pytest.warns(UserWarning, match=FALLBACK):
        checked = check(fn, _stride0(False), compile=compile_eager)
    assert isinstance(checked.eager_out, RuntimeError) and isinstance(checked.compiled_out, RuntimeError)


def test_overlapping_strides_add_twice_as_eager() -> None:
    def fn(x):
        x.add_(1.5)  # elements (0, 1) and (1, 0) share memory: eager adds twice there
        return (x * 1,)

    with pytest.warns(UserWarning, match=FALLBACK):
        check(fn, torch.randn(4).as_strided((2, 2), (1, 1), 0), compile=compile_eager)


def test_reading_a_self_overlapping_input_compiles() -> None:
    def fn(x):
        return (x * 2, x.sum())

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check(fn, torch.randn(3).expand(4, 3), compile=compile_eager)


def _brute_force(size: tuple[int, ...], stride: tuple[int, ...]) -> bool:
    offsets = [sum(i * s for i, s in zip(idx, stride)) for idx in itertools.product(*map(range, size))]
    return len(set(offsets)) < len(offsets)


@pytest.mark.parametrize(
    ("size", "stride"),
    [
        ((2, 3), (3, 1)),
        ((2, 3), (1, 2)),
        ((2, 2), (1, 1)),
        ((3, 2), (1, 2)),
        ((2, 3), (2, 1)),
        ((4,), (0,)),
        ((1, 5), (0, 1)),
        ((2, 2, 2), (4, 1, 2)),
        ((2, 2, 2), (3, 2, 1)),
        ((3, 3), (2, 3)),
        ((2, 3, 2), (1, 4, 3)),
    ],
)
def test_overlaps_itself_is_exact(size: tuple[int, ...], stride: tuple[int, ...]) -> None:
    t = torch.empty(64).as_strided(size, stride)
    assert overlaps_itself(t) == _brute_force(size, stride)
