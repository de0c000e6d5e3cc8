"""The plan: who gets merged, into what base; and the map's invariants."""

from __future__ import annotations

import pytest
import torch
from conveyor.stage_api import CallSignature
from conveyor_synthetic_base import (
    AliasView,
    BaseMap,
    InnerIdx,
    Layout,
    Mutations,
    OuterIdx,
    PlanError,
    SyntheticBase,
    plan,
)
from conveyor_synthetic_base.sharing import shared_storages


def _plan(inputs, data=(), metadata=(), moves_views=False, tight=True):
    muts = Mutations(frozenset(map(OuterIdx, data)), frozenset(map(OuterIdx, metadata)), moves_views)
    return plan(shared_storages(inputs, CallSignature.of(inputs).groups), muts, tight=tight)


X = torch.zeros(6, 8)


def test_nothing_shared_or_nothing_mutated_needs_no_base() -> None:
    assert _plan([X, torch.zeros(3)], data=[0]) == ()
    assert _plan([X[0:3], X[2:5]]) == ()  # overlap, no mutation
    assert _plan([X[0:3], X[2:5]], metadata=[1]) == ()  # metadata only


def test_disjoint_inputs_stay_apart() -> None:
    assert _plan([X[0:2], X[3:5]], data=[0, 1]) == ()
    assert _plan([X[:, ::2], X[:, 1::2]], data=[0, 1]) == ()


def test_overlapping_group_with_a_data_mutation_is_merged() -> None:
    (base,) = _plan([X[0:3], X[2:5], torch.zeros(2)], data=[1])
    assert base.members == (0, 1)
    assert base.from_root and base.view == Layout(4, (5, 8), (8, 1), 0)  # rows 0-4
    assert base.aliases[1] == AliasView(OuterIdx(1), (3, 8), (8, 1), 16, exact_strides=False)


def test_base_is_the_common_tensor_when_it_is_exactly_the_range() -> None:
    (base,) = _plan([X, X[1:3]], data=[1])
    assert base.from_root and base.view is None


def test_tight_base_versus_whole_common_tensor() -> None:
    big = torch.zeros(4096)
    (tight,) = _plan([big[100:110], big[105:120]], data=[0, 1])
    assert tight.view == Layout.dense(4, 100, 120)
    (whole,) = _plan([big[100:110], big[105:120]], data=[0, 1], tight=False)
    assert whole.view is None


def test_sub_boxes_get_their_bounding_box() -> None:
    (base,) = _plan([X[:, 1:3], X[:, 2:6]], data=[0])
    assert base.view == Layout(4, (6, 5), (8, 1), 1)  # 30 elements, where the range holds 45


def test_base_takes_in_mutated_inputs_it_would_write_over() -> None:
    row = X[0]
    # columns 0-1 and 1-2 overlap; the tight span [0, 3) covers x[0, 2] too
    bases = _plan([row[0:2], row[1:3], row[2:3]], data=[0, 2])
    assert [b.members for b in bases] == [(0, 1, 2)]
    # a read-only input under the span is left alone
    (base,) = _plan([row[0:2], row[1:2], row[3:4]], data=[0])
    assert base.members == (0, 1)


def test_moved_views_are_merged_with_data_mutations() -> None:
    assert _plan([X[0:2], X[3:5]], data=[0], metadata=[1]) == ()
    (base,) = _plan([X[0:2], X[3:5]], data=[0], metadata=[1], moves_views=True)
    assert base.members == (0, 1)


def test_two_groups_in_one_storage() -> None:
    bases = _plan([X[0, 0:4], X[3:5], X[0, 2:6], X[4:6]], data=[1, 2])
    assert [b.members for b in bases] == [(0, 2), (1, 3)]


def test_mixed_dtypes_are_refused() -> None:
    x = torch.zeros(8)
    with pytest.raises(PlanError, match="different dtypes"):
        _plan([x[0:4], x.view(torch.int32)[2:6]], data=[0])


def test_no_common_tensor_with_grad_is_refused() -> None:
    x = torch.zeros(8, requires_grad=True) * 1
    other = torch.empty(0).set_(x.untyped_storage(), 2, (4,), (1,)).requires_grad_()
    with pytest.raises(PlanError, match="not views of one tensor"):
        _plan([x[0:4], other], data=[0])


def test_map_places_bases_at_first_member() -> None:
    (base,) = _plan([torch.zeros(1), X[0:3], torch.zeros(1), X[2:5]], data=[1])
    m = BaseMap.place(4, (base,))
    assert m.passed == ((0, 0), (2, 2))
    assert m.bases == ((1, base),)
    assert m.inner_count == 3 and m.merged() == (1, 3)
    assert m.to_inner(["a", X[0:3], "c", X[2:5]])[0::2] == ["a", "c"]


def test_map_invariants() -> None:
    (base,) = _plan([X[0:3], X[2:5]], data=[1])
    with pytest.raises(ValueError, match="BaseMap"):
        BaseMap(3, (), ((InnerIdx(0), base),))  # outer 2 is nowhere
    with pytest.raises(ValueError, match="BaseMap"):
        BaseMap(2, (), ((InnerIdx(1), base),))  # inner positions skip 0
    with pytest.raises(ValueError, match="SyntheticBase"):
        SyntheticBase(base.aliases[:1], base.anchor, True, None)


def test_a_permuted_common_tensor_is_not_the_base() -> None:
    root = torch.empty_strided((6, 8), (1, 6))  # dense, not contiguous, no _base
    (base,) = _plan([root, root[1:3]], data=[1])
    assert base.from_root and base.view == Layout.dense(4, 0, 48)


def test_as_strided_only_off_a_contiguous_tensor_at_offset_zero() -> None:
    x = torch.zeros(2, 2)
    # x[:, 1::2] is (2, 1) with strides (2, 2); its metadata is handed back, so only as_strided
    # rebuilds it exactly, and only off x itself
    (base,) = _plan([x[:, 1::2], x[:, 1::2]], data=[0], metadata=[0])
    assert base.view is None
    # with grad too: functionalize's as_strided_scatter has the right derivative
    g = torch.zeros(2, 2, requires_grad=True) * 1
    (base,) = _plan([g[:, 1::2], g[:, 1::2]], data=[0], metadata=[0])
    assert base.view is None
