"""A program loaded from the disk cache unpickles its stage graphs only when
they are asked for (Note [Stage graphs loaded on demand] in
conveyor.runtime.stored_graphs)."""

from __future__ import annotations

from pathlib import Path

import conveyor
import pytest
import torch
from conveyor.errors import ConveyorError
from conveyor.protocol import artifacts, structured_trace
from conveyor.runtime import stored_graphs
from conveyor.runtime.stored_graphs import StoredGraphs, resolve


def fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a * b).sin() + a


@pytest.fixture
def unpickled(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The entries whose stage graphs were unpickled, in order (no structured
    trace listening: pytest's log capture would write every artifact)."""
    monkeypatch.setattr(structured_trace, "_sink", lambda: None)
    seen: list[str] = []
    original = StoredGraphs.get

    def get(self: StoredGraphs) -> tuple[conveyor.StageGraph, ...]:
        if not self.loaded:
            seen.append(self._where)
        return original(self)

    monkeypatch.setattr(StoredGraphs, "get", get)
    return seen


def test_conveyor_compile_loads_the_stage_graphs_when_asked(tmp_path: Path, unpickled: list[str]) -> None:
    a, b = torch.randn(4, 5), torch.randn(4, 5)
    first = conveyor.compile(fn, cache=True, cache_dir=str(tmp_path))
    torch.testing.assert_close(first(a, b), fn(a, b))
    made = conveyor.last_graphs(first)
    second = conveyor.compile(fn, cache=True, cache_dir=str(tmp_path))
    torch.testing.assert_close(second(a, b), fn(a, b))
    torch.testing.assert_close(second(a, b), fn(a, b))
    assert unpickled == [] and isinstance(second.last.stage_graphs, StoredGraphs)  # loaded, not unpickled
    loaded = conveyor.last_graphs(second)
    assert isinstance(loaded, tuple) and len(unpickled) == 1
    assert [(g.stage, g.label, g.step) for g in loaded] == [(g.stage, g.label, g.step) for g in made]
    assert [g.graph.code for g in loaded] == [g.graph.code for g in made]
    assert conveyor.last_graphs(second) is loaded and len(unpickled) == 1  # once


def test_behind_dynamo_the_stage_graphs_load_when_asked(tmp_path: Path, unpickled: list[str]) -> None:
    options = {"cache": True, "cache_dir": str(tmp_path)}
    a, b = torch.randn(6), torch.randn(6)
    torch._dynamo.reset()
    first = torch.compile(fn, backend="conveyor", options=options)
    first(a, b)
    made = conveyor.last_graphs(first)
    torch._dynamo.reset()
    second = torch.compile(fn, backend="conveyor", options=options)
    torch.testing.assert_close(second(a, b), fn(a, b))
    assert unpickled == []
    loaded = conveyor.last_graphs(second)
    assert len(unpickled) == 1
    assert [(g.stage, g.label) for g in loaded] == [(g.stage, g.label) for g in made]
    assert [g.graph.code for g in loaded] == [g.graph.code for g in made]


def test_stage_graphs_that_do_not_unpickle_are_a_clear_error() -> None:
    stored = StoredGraphs(b"not a pickle", (), "entry 0123456789ab")
    with pytest.raises(ConveyorError, match="entry 0123456789ab cannot be unpickled.*delete that entry"):
        resolve(stored)
    assert resolve(()) == ()


def test_a_structured_trace_gets_the_stored_graphs_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    compiled = conveyor.compile(fn)
    compiled(torch.randn(3), torch.randn(3))
    graphs = conveyor.last_graphs(compiled)
    names = tuple(structured_trace.artifact_name(g) for g in graphs)
    stored = StoredGraphs(artifacts.dumps(graphs), names, "entry 0123456789ab")
    listening = [True]
    written: list[tuple[str, str]] = []

    def trace(kind: str, metadata_fn, payload_fn, **extra) -> None:  # type: ignore[no-untyped-def]
        written.append((metadata_fn()["name"], payload_fn()))

    monkeypatch.setattr(structured_trace, "_sink", lambda: (trace, frozenset()) if listening[0] else None)
    stored_graphs.emit(stored, "/cache/ab/ab12.program")
    assert [name for name, _ in written] == ["conveyor_disk_cache_hit", *names]
    assert [text for _, text in written] == ["/cache/ab/ab12.program", *(str(g) for g in graphs)]
    # torch's lazy handler removes itself at the first artifact when no trace folder is set
    written.clear()
    fresh = StoredGraphs(artifacts.dumps(graphs), names, "entry 0123456789ab")

    def lazy(kind: str, metadata_fn, payload_fn, **extra) -> None:  # type: ignore[no-untyped-def]
        payload_fn()  # asked for even though nothing is written
        listening[0] = False

    monkeypatch.setattr(structured_trace, "_sink", lambda: (lazy, frozenset()) if listening[0] else None)
    stored_graphs.emit(fresh, "/cache/ab/ab12.program")
    assert not fresh.loaded


def test_a_deferred_value_is_unpickled_on_first_use() -> None:
    # Note [Values loaded on demand]
    from conveyor.stage_api import Deferred

    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.output((graph.call_function(torch.ops.aten.sin.default, (x,)),))
    gm = torch.fx.GraphModule(torch.nn.Module(), graph)
    held = Deferred(gm)
    assert held.loaded and held.get() is gm
    loaded = artifacts.loads(artifacts.dumps((held, held)))
    assert loaded[0] is loaded[1] and not loaded[0].loaded
    made = loaded[0].get()
    assert loaded[0].loaded and made is loaded[0].get() and made.code == gm.code
    assert artifacts.loads(artifacts.dumps(loaded[0])).get().code == gm.code  # stored again after its load
    fake = torch._subclasses.FakeTensorMode().from_tensor(torch.ones(1))
    with pytest.raises(artifacts.Unpicklable):
        artifacts.dumps(Deferred(fake))
