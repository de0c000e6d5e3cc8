"""Random views of random bases, passed in random subsets, under random
in-place ops, against eager PyTorch (bounded example count, for CI).

``test_random_aliasing_matches_eager`` runs dedupe + synthetic_base + the
eager backend, so a failure is this package's.
``test_random_aliasing_full_pipeline`` runs the full pipeline (dedupe,
synthetic_base, functionalize, autograd) on the same family plus
``as_strided`` views with overlapping or zero strides, metadata mutations
(also ``resize_`` and ``as_strided_`` right after a data write of the same
input), writes under ``no_grad`` and through ``detach``, with and without grad.

CI runs a few hundred examples; set ``CONVEYOR_FUZZ_EXAMPLES`` (e.g. 5000) to
run many more (the examples then vary from run to run).
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable
from typing import Any

import torch
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

View = Callable[[torch.Tensor], torch.Tensor]


@st.composite
def views(draw: Any, rows: int, cols: int) -> tuple[str, View]:
    kind = draw(st.sampled_from(["rows", "cols", "strided", "transpose", "diagonal", "as_strided", "whole"]))
    if kind == "rows":
        a = draw(st.integers(0, rows - 1))
        b = draw(st.integers(a + 1, rows))
        return f"r[{a}:{b}]", lambda r: r[a:b]
    if kind == "cols":
        a = draw(st.integers(0, cols - 1))
        b = draw(st.integers(a + 1, cols))
        return f"r[:, {a}:{b}]", lambda r: r[:, a:b]
    if kind == "strided":
        a = draw(st.integers(0, cols - 1))
        return f"r[:, {a}::2]", lambda r: r[:, a::2]
    if kind == "transpose":
        return "r.t()", lambda r: r.t()
    if kind == "diagonal":
        k = draw(st.integers(-(rows - 1), cols - 1))
        return f"r.diagonal({k})", lambda r: r.diagonal(k)
    if kind == "as_strided":
        step = draw(st.integers(1, 3))
        n = draw(st.integers(1, (rows * cols - 1) // step + 1))
        off = draw(st.integers(0, rows * cols - 1 - (n - 1) * step))
        return f"r.as_strided(({n},), ({step},), {off})", lambda r: r.as_strided(
            (n,), (step,), r.storage_offset() + off
        )
    return "r", lambda r: r


OPS: dict[str, Callable[[torch.Tensor], Any]] = {
    "add_": lambda t: t.add_(1.5),
    "mul_": lambda t: t.mul_(-2),
    "sub_view_": lambda t: t[..., :1].sub_(3),
    "t_": lambda t: t.t_() if t.dim() == 2 else None,
    "unsqueeze_": lambda t: t.unsqueeze_(0),
    "read": lambda t: None,
}
#: core capture cannot trace ``b.unsqueeze_(0); b[..., :1]`` on a view that
#: requires grad (IndexError from make_fx, with or without aliasing)
GRAD_OPS = sorted(set(OPS) - {"unsqueeze_"})


@st.composite
def programs(draw: Any) -> tuple[tuple[int, int], list[tuple[str, View]], list[tuple[int, str]], bool]:
    rows, cols = draw(st.integers(2, 5)), draw(st.integers(2, 5))
    inputs = draw(st.lists(views(rows, cols), min_size=2, max_size=4))
    requires_grad = draw(st.booleans())
    names = GRAD_OPS if requires_grad else sorted(OPS)
    ops = draw(st.lists(st.tuples(st.integers(0, len(inputs) - 1), st.sampled_from(names)), max_size=4))
    return (rows, cols), inputs, ops, requires_grad


def _program(ops: list[tuple[int, str]]) -> Callable[..., Any]:
    def program(*inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        for i, op in ops:
            OPS[op](inputs[i])
        return tuple(t * 1 for t in inputs)

    return program


#: examples per test: ``CONVEYOR_FUZZ_EXAMPLES`` for long runs outside CI
LONG = int(os.environ.get("CONVEYOR_FUZZ_EXAMPLES", "0"))
_HEALTH = [HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much]


@settings(max_examples=LONG or 30, deadline=None, suppress_health_check=_HEALTH, derandomize=not LONG)
@given(programs())
def test_random_aliasing_matches_eager(stages_only: Any, check_aliased: Any, example: Any) -> None:
    shape, inputs, ops, requires_grad = example
    check_aliased(_program(ops), lambda r: [v(r) for _, v in inputs], shape, requires_grad, stages_only)


@st.composite
def overlapping_views(draw: Any, rows: int, cols: int) -> tuple[str, View]:
    """Two-dim ``as_strided`` views whose strides may be 0 or let elements
    share memory (``(1, 1)``), or any view of :func:`views`."""
    if draw(st.booleans()):
        return draw(views(rows, cols))
    a, b = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    s1, s2 = draw(st.integers(0, 3)), draw(st.integers(0, 2))
    span = (a - 1) * s1 + (b - 1) * s2
    assume(span <= rows * cols - 1)
    off = draw(st.integers(0, rows * cols - 1 - span))
    return f"r.as_strided(({a}, {b}), ({s1}, {s2}), {off})", lambda r: r.as_strided(
        (a, b), (s1, s2), r.storage_offset() + off
    )


def _no_grad_add(t: torch.Tensor) -> None:
    with torch.no_grad():
        t.add_(1)


def _write_then_resize(t: torch.Tensor) -> None:
    """A data write, then a metadata write of the same input: functionalize
    replays the ``resize_`` on the written value (h_fuzz's B3, B4, B6)."""
    t.mul_(2)
    t.resize_(max(t.numel() - 1, 1))


def _write_then_as_strided(t: torch.Tensor) -> None:
    """As above with ``as_strided_`` at the input's own storage offset (an
    absolute offset: h_fuzz's B1)."""
    t.add_(1)
    if t.numel():
        t.as_strided_((1,), (1,), t.storage_offset())


FULL_OPS: dict[str, Callable[[torch.Tensor], Any]] = {
    **OPS,
    "zero_first_": lambda t: t[0].zero_() if t.dim() else None,
    "select_mul_": lambda t: t.select(-1, -1).mul_(3) if t.dim() else None,
    "flat_fill_": lambda t: t.view(-1)[0].fill_(7.0) if t.is_contiguous() else None,
    "squeeze_": lambda t: t.squeeze_(),
    "detach_mul_": lambda t: t.detach().mul_(2),
    "no_grad_add_": _no_grad_add,
    "write_resize_": _write_then_resize,
    "write_as_strided_": _write_then_as_strided,
}
#: eager refuses ``resize_`` of a tensor that requires grad
FULL_GRAD_OPS = sorted(set(FULL_OPS) - {"unsqueeze_", "write_resize_"})


@st.composite
def full_programs(draw: Any) -> tuple[tuple[int, int], list[tuple[str, View]], list[tuple[int, str]], bool, bool]:
    rows, cols = draw(st.integers(2, 4)), draw(st.integers(2, 4))
    inputs = draw(st.lists(overlapping_views(rows, cols), min_size=1, max_size=4))
    requires_grad = draw(st.booleans())
    names = FULL_GRAD_OPS if requires_grad else sorted(FULL_OPS)
    ops = draw(st.lists(st.tuples(st.integers(0, len(inputs) - 1), st.sampled_from(names)), max_size=4))
    return (rows, cols), inputs, ops, requires_grad, draw(st.booleans())


def _full_program(ops: list[tuple[int, str]], return_first: bool) -> Callable[..., Any]:
    def program(*inputs: torch.Tensor) -> tuple[torch.Tensor, ...]:
        for i, op in ops:
            FULL_OPS[op](inputs[i])
        return (inputs[0],) if return_first else tuple(t * 1 for t in inputs)

    return program


#: 200 since the metadata writes after a data write (their programs mostly run
#: eagerly, with a warning, and cost more): about the CI time of the 300 before
@settings(max_examples=LONG or 60, deadline=None, suppress_health_check=_HEALTH, derandomize=not LONG)
@given(full_programs())
def test_random_aliasing_full_pipeline(full: Any, check_aliased: Any, example: Any) -> None:
    """Every program runs with eager's results and gradients (writes through
    an input that overlaps itself run eagerly, with a warning)."""
    shape, inputs, ops, requires_grad, return_first = example
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="conveyor: running", category=UserWarning)
        check_aliased(_full_program(ops, return_first), lambda r: [v(r) for _, v in inputs], shape, requires_grad, full)
