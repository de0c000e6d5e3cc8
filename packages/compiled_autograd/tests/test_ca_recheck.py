"""Note [The last variant first]: the cheap check holds exactly for values
laid out as the call it was built from."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import torch
from conveyor_compiled_autograd.recheck import LastVariant


def _values(**change: Any) -> list[Any]:
    torch.manual_seed(0)
    base = torch.randn(4, 6)
    values: list[Any] = [base[1:], torch.randn(3, 5), 7, None, 2.5]
    for i, v in change.items():
        values[int(i[1:])] = v
    return values


def _last(values: list[Any], keyed: tuple[Any, ...] = ()) -> LastVariant:
    return LastVariant(values, [0, 1, 2], SimpleNamespace(), keyed)


def test_the_check_holds_for_new_tensors_of_the_same_layouts() -> None:
    last = _last(_values())
    assert last.holds(_values())
    assert last.dynamic(_values())[2] == 7


def test_the_check_fails_on_any_difference_the_general_way_would_see() -> None:
    last = _last(_values())
    assert not last.holds(_values(v0=torch.randn(3, 6)))  # offset 0, not 6
    assert not last.holds(_values(v1=torch.randn(5, 3).t()))  # strides
    assert not last.holds(_values(v1=torch.randn(3, 4)))  # sizes
    assert not last.holds(_values(v1=torch.randn(3, 5, dtype=torch.float64)))
    assert not last.holds(_values(v1=torch.randn(3, 5, requires_grad=True)))
    assert not last.holds(_values(v2=8))
    assert not last.holds(_values(v3=1))  # a type
    assert not last.holds(_values(v4=3.5))  # a constant
    assert not last.holds(_values()[:4])


def test_the_check_compares_the_stages_keys() -> None:
    same = SimpleNamespace(cache_key=lambda signature: signature.same)
    x = torch.randn(3, 5)
    last = _last(_values(v1=x[:], v0=torch.randn(4, 6)[1:]), (same,))
    assert last.holds(_values(v1=torch.randn(3, 5), v0=torch.randn(4, 6)[1:]))
    twice = _values()
    twice[0] = twice[1] = torch.randn(3, 5)
    last = _last(twice, (same,))
    assert not last.holds(_values(v0=torch.randn(3, 5), v1=torch.randn(3, 5)))  # two tensors, not one twice
    other = torch.randn(3, 5)
    assert last.holds([other, other, 7, None, 2.5])


def test_the_stages_keys_follow_the_storage_groups() -> None:
    """The keys are read again only when the storage groups differ from the
    recorded call's: new storages grouped the same way hold, regrouped ones do not."""
    groups = SimpleNamespace(cache_key=lambda signature: signature.groups)

    def shared() -> list[Any]:
        base = torch.randn(2, 3, 5)
        return [base[0], base[1], 7, None, 2.5]

    def apart() -> list[Any]:
        return [torch.randn(3, 5), torch.randn(3, 5)[:], 7, None, 2.5]

    last = LastVariant(shared(), [0, 1, 2], SimpleNamespace(), (groups,))
    assert last.holds(shared())
    assert not last.holds([*apart()[:1], shared()[1], *apart()[2:]])  # the same offsets, two storages
    assert last.holds(shared())  # and the recorded groups are still the ones checked against
    views = shared()
    views[0] = torch.randn(2, 3, 5)[0]  # the same layouts and offsets, another storage
    assert not last.holds(views)
    last = LastVariant(apart(), [0, 1, 2], SimpleNamespace(), (groups,))
    assert last.holds(apart())
    one = torch.randn(3, 5)
    assert not last.holds([one, one[:], 7, None, 2.5])  # one storage now: the keys are read and differ
