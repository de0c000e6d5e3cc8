"""Merged inputs rebuilt from a base with view ops: same layout, same
elements, and as_strided only where the box construction does not apply."""

from __future__ import annotations

import pytest
import torch
from conveyor_synthetic_base import Layout
from conveyor_synthetic_base.replay import bounding_box, box_window, replay
from hypothesis import given, settings
from hypothesis import strategies as st

X = torch.arange(48.0).view(6, 8)
VIEWS = {
    "rows": X[1:3],
    "columns": X[:, 2:5],
    "transpose": X.t(),
    "diagonal": X[:, 2:].diagonal(),
    "strided": X[1:5, ::2],
    "strided_transposed": X[1:5, ::2].t(),
    "row": X[2],
    "expanded": X[2:3].expand(4, 8),
    "single": X[3, 4:5],
    "permuted_3d": X.view(2, 3, 8).permute(2, 0, 1),
}


@pytest.mark.parametrize("name", sorted(VIEWS))
@pytest.mark.parametrize("base", ["root", "span"])
def test_replay_matches_layout(name: str, base: str) -> None:
    v = VIEWS[name]
    window = box_window(v.size(), v.stride(), v.storage_offset(), 0, X.numel()) or (v.storage_offset(), X.numel())
    b = X if base == "root" else X.view(-1)[window[0] : window[1]]  # as the plan widens spans
    out = replay(b, v.size(), v.stride(), v.storage_offset())
    assert out is not None
    assert out.size() == v.size() and out.storage_offset() == v.storage_offset()
    assert out.stride() == v.stride()
    assert torch.equal(out, v)
    assert out.untyped_storage().data_ptr() == X.untyped_storage().data_ptr()


def test_replay_declines_what_boxes_cannot_express() -> None:
    assert replay(X, (3, 3), (1, 1), 0) is None  # overlapping windows
    assert replay(X, (2, 3), (3, 2), 0) is None  # strides that do not divide
    assert replay(X.as_strided((4, 4), (1, 1), 0), (2,), (1,), 0) is None  # a base that overlaps itself


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(1, 4), st.integers(0, 12)), min_size=1, max_size=3),
    st.integers(0, 20),
)
def test_replay_is_exact_or_declines(dims, offset) -> None:
    size = [s for s, _ in dims]
    stride = [t for _, t in dims]
    extent = offset + sum((s - 1) * t for s, t in dims) + 1
    base = torch.arange(float(extent + 5))
    out = replay(base, size, stride, offset)
    if out is not None:
        assert torch.equal(out, base.as_strided(size, stride, offset))
        assert out.storage_offset() == offset


def test_strides_that_do_not_divide_use_stepped_slices() -> None:
    x = torch.arange(35.0).view(5, 7)
    for v in (x[:, ::2], x[1:4, 1::3], x[:, ::2].t()):
        out = replay(x, v.size(), v.stride(), v.storage_offset())
        assert out is not None and torch.equal(out, v) and out.stride() == v.stride()


def test_size_one_dims_keep_their_strides_only_when_asked() -> None:
    v = X[:, 0::8]  # (6, 1), strides (8, 8): unsqueeze would give (8, 1)
    assert replay(X, v.size(), v.stride(), v.storage_offset()) is None
    out = replay(X, v.size(), v.stride(), v.storage_offset(), exact=False)
    assert out is not None and torch.equal(out, v) and out.stride()[0] == 8


def test_sub_box_bases_rebuild_their_members() -> None:
    members = [X[:, 1:3], X[:, 2:6], X[1:3, 2:5], X[:, 1:6:2], X[:, 2:5].t(), X[2, 1:4]]
    box = bounding_box(Layout.of(X), [Layout.of(m) for m in members])
    assert box == Layout(4, (6, 5), (8, 1), 1)
    base = X.as_strided(box.size, box.stride, box.offset)
    for v in members:
        out = replay(base, v.size(), v.stride(), v.storage_offset())
        assert out is not None and torch.equal(out, v) and out.stride() == v.stride()
    assert bounding_box(Layout.of(X), [Layout.of(X.diagonal())]) is None
