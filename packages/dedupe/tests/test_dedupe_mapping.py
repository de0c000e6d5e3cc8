import pytest
import torch
from conveyor_dedupe import DedupeMap, InnerIdx, OuterIdx, first_positions


def test_first_positions_by_identity_not_value() -> None:
    x, y = torch.ones(2), torch.ones(2)
    assert first_positions([x, y, x, 3, 3, y]) == (0, 1, 0, 3, 4, 1)


def test_map_round_trip() -> None:
    m = DedupeMap.from_first_positions(first_positions(["a", "b"]))  # non-tensors: no duplicates
    assert not m.has_duplicates
    x, y = torch.ones(1), torch.zeros(1)
    m = DedupeMap.from_first_positions(first_positions([x, y, x, x, y]))
    assert m.kept == (0, 1)
    assert m.inner_of == (0, 1, 0, 0, 1)
    assert m.duplicates() == ((2, 0), (3, 0), (4, 1))
    assert m.to_inner(["x", "y", "x2", "x3", "y2"]) == ["x", "y"]
    assert m.to_outer(["x", "y"]) == ["x", "y", "x", "x", "y"]


@pytest.mark.parametrize(
    ("kept", "inner_of"),
    [
        ((1, 0), (1, 0)),  # not increasing
        ((0,), (0, 1)),  # inner 1 out of range
        ((0, 1), (0, 0)),  # inner 1 kept from an outer that maps elsewhere
        ((1,), (0, 0)),  # outer 0 maps to a later argument
    ],
)
def test_map_invariants(kept: tuple[int, ...], inner_of: tuple[int, ...]) -> None:
    with pytest.raises(ValueError, match="DedupeMap"):
        DedupeMap(tuple(OuterIdx(k) for k in kept), tuple(InnerIdx(i) for i in inner_of))
