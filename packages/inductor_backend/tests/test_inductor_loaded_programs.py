"""A program loaded from conveyor's disk cache (Note [Storing Inductor
programs], Note [Fake values Inductor makes itself]): compiled without fake
values on its operations, served by Inductor's FX graph cache or, on a miss,
built by Inductor from its own; its outputs' layouts checked against those
stored with it. The tests of its full path (``compile_fx_inner``) turn the
lookup by the stored key off (``full_path``; that lookup's own tests are in
``test_inductor_entry_by_key.py``)."""

from __future__ import annotations

import gc
import logging
import pickle
import weakref
from pathlib import Path
from typing import Any

import conveyor
import pytest
import torch
from conveyor.protocol import artifacts
from conveyor.stage_api import Deferred
from conveyor.testing import check
from conveyor_inductor import layouts, lowering, program
from fx_cache_helpers import lookups, mlp, step
from torch._inductor.utils import fresh_cache

pytestmark = pytest.mark.usefixtures("empty_fx_graph_cache")  # conftest


def compile_cached(f: Any, folder: Path) -> Any:
    return conveyor.compile(f, backend="inductor", cache=True, cache_dir=str(folder))


def full_path(monkeypatch: pytest.MonkeyPatch) -> None:
    """Loaded programs compile through ``compile_fx_inner``, not by their stored
    keys (Note [Inductor's entry by its stored key])."""
    monkeypatch.setattr(lowering, "load_entry", lambda *args, **kwargs: None)


@pytest.mark.slow  # about 30 s: a whole build after the miss
def test_a_loaded_program_compiles_on_an_inductor_miss(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    # Note [Fake values Inductor makes itself]: the loaded graphs carry no fake values; a
    # miss in Inductor's cache (emptied here) builds them from its own propagation
    model, x = mlp(), torch.randn(4, 16)
    want = step(compile_cached(model, tmp_path), model, x)
    assert lookups() == {"hit": 0, "miss": 2, "bypass": 0}
    with fresh_cache(), caplog.at_level(logging.INFO, logger="conveyor"):
        got = step(compile_cached(model, tmp_path), model, x)
        assert lookups() == {"hit": 0, "miss": 2, "bypass": 0}  # built again by Inductor
    assert sum("disk cache hit" in r.getMessage() for r in caplog.records) == 1  # the training program loaded
    assert all(torch.equal(a, b) for a, b in zip(want, got, strict=True))
    with fresh_cache():
        check(mlp(), x, compile=lambda m: compile_cached(m, tmp_path))  # eager's results, no-grad too
        with torch.no_grad():
            check(mlp(), x, compile=lambda m: compile_cached(m, tmp_path))


def test_a_loaded_program_is_served_without_fake_values(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    full_path(monkeypatch)
    model, x = mlp(), torch.randn(4, 16)
    step(compile_cached(model, tmp_path), model, x)
    lookups()
    handed: list[torch.fx.GraphModule] = []
    original = lowering.compile_decomposed

    def spied(gm: torch.fx.GraphModule, *args: Any, **kwargs: Any) -> Any:
        handed.append(gm)
        return original(gm, *args, **kwargs)

    monkeypatch.setattr(lowering, "compile_decomposed", spied)
    step(compile_cached(model, tmp_path), model, x)
    assert lookups() == {"hit": 2, "miss": 0, "bypass": 0}
    assert len(handed) == 2
    for gm in handed:  # the placeholders' fake inputs only
        assert all(("val" in n.meta) == (n.op == "placeholder") for n in gm.graph.nodes)


def test_a_loaded_program_checks_the_stored_output_layouts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Note [Layouts in the inductor backend]: the layouts the first compile's fake values gave
    # are stored with the program and checked after the loaded program's compile
    checked: list[layouts.Layouts] = []
    original = layouts.changed_output_strides

    def spied(expected: layouts.Layouts, compiled: Any) -> list[str]:
        checked.append(expected)
        return original(expected, compiled)

    monkeypatch.setattr(layouts, "changed_output_strides", spied)
    model, x = mlp(), torch.randn(4, 16)
    step(compile_cached(model, tmp_path), model, x)
    first, checked[:] = list(checked), []
    assert len(first) == 2 and first[0][0] == ((4, 8), (8, 1))  # the forward's result

    # loaded: the same layouts, and one Inductor's program does not keep is the stage's clear error
    def wrong(expected: layouts.Layouts, compiled: Any) -> list[str]:
        checked.append(expected)
        return original((((4, 8), (1, 4)), *expected[1:]), compiled)

    monkeypatch.setattr(layouts, "changed_output_strides", wrong)
    with pytest.raises(conveyor.StageError, match="in other layouts than the graph's"):
        step(compile_cached(model, tmp_path), model, x)
    assert checked[0] == first[0]


def test_a_loaded_program_hands_its_graph_over_and_keeps_none(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Note [A loaded graph handed over]: no copy of the stored graph; nothing keeps it after the compile
    full_path(monkeypatch)
    model, x = mlp(), torch.randn(4, 16)
    want = step(compile_cached(model, tmp_path), model, x)
    lookups()
    handed: list[weakref.ref[torch.fx.Graph]] = []
    copies: list[torch.fx.GraphModule] = []
    original, original_copy = lowering.compile_decomposed, program.for_inductor

    def spied(gm: torch.fx.GraphModule, *args: Any, **kwargs: Any) -> Any:
        handed.append(weakref.ref(gm.graph))
        return original(gm, *args, **kwargs)

    def copied(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
        copies.append(gm)
        return original_copy(gm)

    monkeypatch.setattr(lowering, "compile_decomposed", spied)
    monkeypatch.setattr(program, "for_inductor", copied)
    got = step(compile_cached(model, tmp_path), model, x)
    assert lookups() == {"hit": 2, "miss": 0, "bypass": 0} and not copies
    assert all(torch.equal(a, b) for a, b in zip(want, got, strict=True))
    gc.collect()
    assert len(handed) == 2 and all(ref() is None for ref in handed), "a loaded program kept its graph"


def test_a_handed_over_graph_no_longer_pickles() -> None:
    graph = torch.fx.Graph()
    graph.output((graph.placeholder("x"),))
    stored = program._Stored(Deferred(torch.fx.GraphModule(torch.nn.Module(), graph)))
    loaded = artifacts.loads(artifacts.dumps(stored))  # before: the graph, made when first taken
    assert isinstance(loaded, program._Stored) and loaded.graph is not None and not loaded.graph.loaded
    assert isinstance(loaded.take(), torch.fx.GraphModule)
    stored.take()
    with pytest.raises(TypeError, match="after its first call"):
        pickle.dumps(stored)
    with pytest.raises(conveyor.StageError, match="failed to compile on its first call"):
        stored.take()
