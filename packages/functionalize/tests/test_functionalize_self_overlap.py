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


VIEW_FALLBACK = "conveyor: running .* eagerly: it writes through a view whose elements share memory"


@pytest.mark.parametrize("requires_grad", [False, True], ids=["plain", "grad"])
@pytest.mark.parametrize(
    "view",
    [
        lambda b: b.as_strided((2, 3), (1, 0)),  # test_view_ops.py's test_flatten_view: the write was lost
        lambda b: b.unfold(0, 3, 2),  # functionalization refused it (StageError)
        lambda b: b[:2].unsqueeze(1).expand(2, 3),
    ],
    ids=["as_strided", "unfold", "expand"],
)
def test_a_write_through_a_self_overlapping_view_of_an_input(view, requires_grad: bool) -> None:
    """Note [Writes through a self-overlapping view]: the input does not overlap itself, the view does."""

    def fn(base):
        v = view(base)
        v[1, 1] = 5
        return base, v * 1

    with pytest.warns(UserWarning, match=VIEW_FALLBACK):
        check(fn, torch.randn(6, requires_grad=requires_grad) * 1, compile=compile_eager)


def test_a_write_through_a_self_overlapping_view_of_an_intermediate() -> None:
    def fn(x):
        t = x.clone()
        v = t.as_strided((2, 3), (1, 0))
        v[1, 1] = 5
        return t * 2

    with pytest.warns(UserWarning, match=VIEW_FALLBACK):
        check(fn, torch.randn(6), compile=compile_eager)


def test_a_write_through_a_view_of_a_self_overlapping_view_that_does_not_overlap_compiles() -> None:
    """Only the chain of views a write goes through decides: reading an expanded view elsewhere compiles."""

    def fn(x):
        e = x.expand(3, 6)
        x[1:3].mul_(2)
        return e.sum(0)

    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="conveyor:")
        check(fn, torch.randn(6), compile=compile_eager)
