"""Note [Storage identity]: one probed way to identify a storage, the same
number ``untyped_storage()._cdata`` gives, on real and fake tensors; a probe
that fails says so and falls back to the Python read."""

from __future__ import annotations

import importlib

import pytest
import torch
from conveyor.analysis import signature
from conveyor.analysis.signature import CallSignature, storage_id
from torch._subclasses.fake_tensor import FakeTensorMode


def test_storage_id_is_the_storage_address_on_real_and_fake_tensors() -> None:
    a, b = torch.arange(6.0), torch.ones(3)
    with FakeTensorMode():
        f = torch.empty(5)
    for t in (a, a[2:], a.view(2, 3).t(), b, f, f[1:]):
        assert storage_id(t) == t.untyped_storage()._cdata
    assert storage_id(a) == storage_id(a[1:]) != storage_id(b)
    assert CallSignature.of([a, b, a[1:], 3]).groups == (0, 1, 0, -1)


def test_a_failing_probe_warns_and_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    def wrong(t: torch.Tensor) -> int:
        return 7

    monkeypatch.setattr(torch._C, "_storage_id", wrong, raising=False)
    with pytest.warns(UserWarning, match="differs from untyped_storage"):
        read = signature._probe_storage_id()
    a = torch.ones(2)
    assert read(a) == a.untyped_storage()._cdata
    monkeypatch.delattr(torch._C, "_storage_id", raising=False)
    with pytest.warns(UserWarning, match="missing"):
        assert signature._probe_storage_id()(a) == a.untyped_storage()._cdata


def test_the_module_reads_the_probed_function() -> None:
    assert importlib.import_module("conveyor.stage_api").storage_id is storage_id
