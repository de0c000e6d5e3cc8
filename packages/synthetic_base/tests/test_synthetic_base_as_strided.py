"""Merged inputs that only ``as_strided`` rebuilds (self-overlapping or
stride-0 views), with grad, through the full pipeline: the examples of
issue 12 that the stage used to refuse, and the eager fallback for a write
through a merged input that overlaps itself."""

from __future__ import annotations

from typing import Any

import pytest


def zero_base(x0, x1):
    x1.zero_()
    return (x0,)


def zero_then_squeeze_overlapping(x0, x1, x2):
    x0.zero_()
    x2.squeeze_(1)
    return (x0,)


def write_base_read_broadcast(x0, x1):
    x1[0].mul_(3)
    return (x0 * 2, x1 + 1)


CASES = [
    (zero_base, lambda r: (r.as_strided((1, 2, 2), (0, 1, 1), 0), r)),
    (zero_then_squeeze_overlapping, lambda r: (r, r, r.as_strided((1, 2, 2), (0, 0, 0), 0).transpose(0, 1))),
    (write_base_read_broadcast, lambda r: (r.as_strided((3, 2), (0, 1), 1), r)),
]


@pytest.mark.parametrize("requires_grad", [False, True], ids=["plain", "grad"])
@pytest.mark.parametrize(("program", "make"), CASES, ids=[p.__name__ for p, _ in CASES])
def test_as_strided_members_with_grad(
    program: Any, make: Any, requires_grad: bool, full: Any, check_aliased: Any
) -> None:
    check_aliased(program, make, (2, 2), requires_grad, full)


@pytest.mark.parametrize("requires_grad", [False, True], ids=["plain", "grad"])
def test_write_through_a_merged_self_overlapping_input_runs_eagerly(
    requires_grad: bool, full: Any, check_aliased: Any
) -> None:
    def program(x0, x1):
        x0[0].zero_()  # x0's two elements are one memory location, which x1 sees too
        return (x0 * 1, x1 * 1)

    with pytest.warns(UserWarning, match="stage 'synthetic_base'.* eagerly: it writes through input"):
        check_aliased(program, lambda r: (r.as_strided((2,), (0,), 1), r), (2, 2), requires_grad, full)


def test_as_strided_of_merged_inputs_laid_out_in_part_of_their_storage_runs_eagerly(
    full: Any, check_aliased: Any
) -> None:
    """Note [Storage offsets functionalization cannot replay]: ``as_strided_``
    addresses the caller's storage; neither the record's functional run nor a
    synthetic base holds it (the program used to raise "out of bounds for
    storage" in this stage)."""

    def program(a, b, c):
        a.as_strided_((2,), (1,), 5)
        b.as_strided_((1, 2), (1, 1), 4)
        a.add_(1)
        b.mul_(2)
        c.sub_(1)
        return (a + 1,)

    def make(r):
        return r.as_strided((1, 2), (1, 0), 5), r.as_strided((2, 2), (0, 1), 4), r.diagonal(-2)

    with pytest.warns(UserWarning, match="stage 'synthetic_base'.* eagerly: it takes an as_strided"):
        check_aliased(program, make, (3, 3), False, full)
