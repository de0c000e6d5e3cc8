"""Exact overlap of strided layouts, against enumerating every byte."""

from __future__ import annotations

import pytest
import torch
from conveyor.analysis.overlap import Layout, overlaps
from hypothesis import given, settings
from hypothesis import strategies as st


def _bytes(t: torch.Tensor) -> set[int]:
    out: set[int] = set()
    if t.numel() == 0:
        return out
    index = torch.arange(t.untyped_storage().nbytes() // t.element_size()).as_strided(
        t.size(), t.stride(), t.storage_offset()
    )
    for e in index.reshape(-1).tolist():
        out.update(range(e * t.element_size(), (e + 1) * t.element_size()))
    return out


def test_layout_spans_and_density() -> None:
    x = torch.zeros(6, 8)
    assert Layout.of(x[1:3]).elements == (8, 24)
    assert Layout.of(x[1:3]).bytes == (32, 96)
    assert Layout.of(x[1:3]).is_dense and Layout.of(x.t()).is_dense
    assert not Layout.of(x[:, ::2]).is_dense and not Layout.of(x[:, 1:3]).is_dense
    assert Layout.of(x[2:2]).elements == (16, 16)
    with pytest.raises(ValueError, match="Layout"):
        Layout(4, (2,), (1, 1), 0)


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (lambda x: x[0:3], lambda x: x[2:5], True),
        (lambda x: x[0:2], lambda x: x[2:4], False),
        (lambda x: x[:, ::2], lambda x: x[:, 1::2], False),  # bounds intersect, elements do not
        (lambda x: x[:, 0:4], lambda x: x[:, 4:8], False),
        (lambda x: x.diagonal(), lambda x: x[1, 1:2], True),
        (lambda x: x.diagonal(), lambda x: x[1, 2:], False),
        (lambda x: x[2:2], lambda x: x, False),  # empty
    ],
)
def test_overlap_examples(a, b, expected: bool) -> None:
    x = torch.zeros(6, 8)
    assert overlaps(Layout.of(a(x)), Layout.of(b(x))) is expected


def test_overlap_across_dtypes_is_by_byte() -> None:
    x = torch.zeros(16)
    halves = x.view(torch.int16)
    assert overlaps(Layout.of(x[3:4]), Layout.of(halves[7:8]))  # bytes 14-15 are in float 3
    assert not overlaps(Layout.of(x[3:4]), Layout.of(halves[8:9]))


layouts = st.tuples(
    st.lists(st.integers(0, 4), min_size=1, max_size=3),
    st.lists(st.integers(0, 9), min_size=3, max_size=3),
    st.integers(0, 40),
)


@settings(max_examples=60, deadline=None)
@given(layouts, layouts, st.sampled_from([torch.float32, torch.float64]))
def test_overlap_is_exact(a, b, dtype) -> None:
    storage = torch.zeros(200, dtype=torch.float64)
    x = storage.view(dtype)
    ta = x.as_strided(a[0], a[1][: len(a[0])], a[2])
    tb = storage.as_strided(b[0], b[1][: len(b[0])], b[2])
    assert overlaps(Layout.of(ta), Layout.of(tb)) == bool(_bytes(ta) & _bytes(tb))
