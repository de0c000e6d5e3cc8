"""A program loaded from conveyor's disk cache finds Inductor's entries by the
keys its first compile used (Note [Inductor's entry by its stored key]):
no key computed, the same kernels and results; anything else Inductor's key
covers that changed since (its configuration, a global setting, the entry
gone, this torch lacking the internals) takes the full path, which computes
Inductor's key itself."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import conveyor
import pytest
import torch
import torch._inductor.codecache as codecache
import torch._inductor.config as inductor_config
from conveyor.testing import check
from conveyor_inductor import fx_entry, lowering
from fx_cache_helpers import lookups, mlp, step
from torch._inductor.utils import fresh_cache

pytestmark = pytest.mark.usefixtures("empty_fx_graph_cache")  # conftest
#: the tests of the lookup itself, where this torch has what it needs (torch 2.11 lacks some:
#: every program takes the full path there, which the other tests check)
needs_lookup = pytest.mark.skipif(fx_entry.api() is None, reason="this torch's Inductor lacks what the lookup needs")


def compile_cached(f: Any, folder: Path) -> Any:
    return conveyor.compile(f, backend="inductor", cache=True, cache_dir=str(folder))


@pytest.fixture
def keys_computed(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """How many times Inductor computes an FX graph cache key."""
    computed: list[str] = []
    original = codecache.compiled_fx_graph_hash

    def counted(*args: Any, **kwargs: Any) -> Any:
        computed.append("key")
        return original(*args, **kwargs)

    monkeypatch.setattr(codecache, "compiled_fx_graph_hash", counted)
    yield computed


def first(tmp_path: Path, keys_computed: list[str]) -> tuple[torch.nn.Module, torch.Tensor, list[torch.Tensor]]:
    """The first process's training step: compiled, stored on both caches."""
    model, x = mlp(), torch.randn(4, 16)
    want = step(compile_cached(model, tmp_path), model, x)
    assert lookups() == {"hit": 0, "miss": 2, "bypass": 0} and len(keys_computed) == 2
    keys_computed.clear()
    return model, x, want


@needs_lookup
def test_a_loaded_program_is_served_by_its_stored_keys(tmp_path: Path, keys_computed: list[str]) -> None:
    model, x, want = first(tmp_path, keys_computed)
    got = step(compile_cached(model, tmp_path), model, x)
    assert lookups() == {"hit": 2, "miss": 0, "bypass": 0}
    assert keys_computed == []  # looked up by the stored keys
    assert all(torch.equal(a, b) for a, b in zip(want, got, strict=True))  # the same kernels
    check(mlp(), x, compile=lambda m: compile_cached(m, tmp_path))  # eager's results
    assert keys_computed == []


@needs_lookup
def test_the_stored_graph_is_never_unpickled(
    tmp_path: Path, keys_computed: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # Note [Values loaded on demand]: served by its stored key, a loaded program never makes its graph
    model, x, _ = first(tmp_path, keys_computed)
    stored: list[Any] = []
    original = lowering.load_entry

    def spied(entry: Any, graph: Any, *args: Any) -> Any:
        stored.append(graph.__self__)  # the Deferred whose get() makes the graph
        return original(entry, graph, *args)

    monkeypatch.setattr(lowering, "load_entry", spied)
    step(compile_cached(model, tmp_path), model, x)
    assert keys_computed == [] and len(stored) == 2
    assert not any(d.loaded for d in stored), "a program loaded by its stored key unpickled its graph"


def test_another_inductor_configuration_takes_the_full_path(tmp_path: Path, keys_computed: list[str]) -> None:
    model, x, want = first(tmp_path, keys_computed)
    with inductor_config.patch(max_fusion_size=8):  # in Inductor's key, not in conveyor's
        got = step(compile_cached(model, tmp_path), model, x)
    assert lookups() == {"hit": 0, "miss": 2, "bypass": 0} and len(keys_computed) == 2
    assert all(torch.allclose(a, b, rtol=1e-5, atol=1e-6) for a, b in zip(want, got, strict=True))


@pytest.mark.slow  # CI time: the other fallbacks stay in the default run
def test_another_global_setting_takes_the_full_path(tmp_path: Path, keys_computed: list[str]) -> None:
    # the matmul settings are in Inductor's key (its details), not in conveyor's
    model, x, _ = first(tmp_path, keys_computed)
    matmul = torch.backends.cuda.matmul
    before = matmul.allow_fp16_reduced_precision_reduction
    matmul.allow_fp16_reduced_precision_reduction = not before
    try:
        step(compile_cached(model, tmp_path), model, x)
    finally:
        matmul.allow_fp16_reduced_precision_reduction = before
    assert lookups() == {"hit": 0, "miss": 2, "bypass": 0} and len(keys_computed) == 2


@pytest.mark.slow  # CI time: the other fallbacks stay in the default run
def test_a_gone_entry_takes_the_full_path(tmp_path: Path, keys_computed: list[str]) -> None:
    model, x, want = first(tmp_path, keys_computed)
    with fresh_cache():  # Inductor's cache emptied: no entry under the stored keys
        got = step(compile_cached(model, tmp_path), model, x)
    assert lookups() == {"hit": 0, "miss": 2, "bypass": 0} and len(keys_computed) == 2
    assert all(torch.equal(a, b) for a, b in zip(want, got, strict=True))


@pytest.mark.parametrize("case", ["no internals", "cache off"])
def test_without_the_internals_or_the_cache_the_full_path(
    tmp_path: Path, keys_computed: list[str], monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    model, x, want = first(tmp_path, keys_computed)
    if case == "no internals":
        monkeypatch.setattr(fx_entry, "api", lambda: None)
        got = step(compile_cached(model, tmp_path), model, x)
        assert lookups() == {"hit": 2, "miss": 0, "bypass": 0} and len(keys_computed) == 2  # found by its key
    else:
        with inductor_config.patch(fx_graph_cache=False):
            got = step(compile_cached(model, tmp_path), model, x)
        assert lookups() == {"hit": 0, "miss": 0, "bypass": 0} and keys_computed == []  # built afresh
    assert all(torch.equal(a, b) for a, b in zip(want, got, strict=True))


@needs_lookup
def test_behind_dynamo_too(tmp_path: Path, keys_computed: list[str]) -> None:
    model, x = mlp(), torch.randn(4, 16)
    options = {"backend": "inductor", "cache": True, "cache_dir": str(tmp_path)}
    want = step(torch.compile(model, backend="conveyor", options=options), model, x)
    assert lookups()["miss"] == 2
    keys_computed.clear()
    torch._dynamo.reset()
    got = step(torch.compile(model, backend="conveyor", options=options), model, x)
    assert lookups() == {"hit": 2, "miss": 0, "bypass": 0} and keys_computed == []
    assert all(torch.equal(a, b) for a, b in zip(want, got, strict=True))
