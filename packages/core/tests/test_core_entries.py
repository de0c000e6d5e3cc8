"""Note [One entry cache]: both entry points keep their entries in one kind
of cache, typed by their key, which logs its hits and misses."""

from __future__ import annotations

import logging

import conveyor
import pytest
import torch
from conveyor.runtime.entries import EntryCache
from conveyor.runtime.recompiles import CallKey, DynamoKey


def _key(n: int) -> DynamoKey:
    return DynamoKey(("core", n), (), (), ())


def test_first_reuse_logged_once_and_recent_entries_bounded(caplog: pytest.LogCaptureFixture) -> None:
    cache: EntryCache[DynamoKey, str] = EntryCache("g", lambda o, n: [f"{o.core} -> {n.core}"], recent_limit=2)
    with caplog.at_level(logging.INFO, logger="conveyor"):
        assert cache.get(_key(0)) is None
        cache.miss(_key(0))
        cache.put(_key(0), "kept")
        for n in (1, 2, 3):
            cache.put(_key(n), f"recent {n}", recent=True)
        assert cache.get(_key(0)) == "kept" and cache.get(_key(0)) == "kept"
        assert _key(1) not in cache and cache.get(_key(3)) == "recent 3"  # the oldest recent one went
        cache.miss(_key(4), "static sizes")
    got = [r.getMessage() for r in caplog.records if r.name == "conveyor"]
    assert got[0].startswith("compiling g: first call (memory cache miss, key ")
    assert sum(m.startswith("memory cache hit g: ") for m in got) == 2  # key 0 once, key 3 once
    assert got[-1].startswith("recompiling g: ('core', ") and got[-1].endswith("; static sizes)")
    assert list(cache) == [_key(0), _key(2), _key(3)] and len(cache) == 3


@pytest.mark.parametrize("kind", ["conveyor.compile", "torch.compile"])
def test_both_entry_points_key_their_entries_by_a_typed_key(kind: str) -> None:
    def fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a * b

    torch._dynamo.reset()
    if kind == "conveyor.compile":
        compiled = conveyor.compile(fn, cache=False, dynamic=False)
        compiled(torch.ones(2), torch.ones(2))
        x = torch.ones(2)
        compiled(x, x)  # one storage: another entry
        assert len(compiled.entries) == 2 and all(isinstance(k, CallKey) for k in compiled.entries)
        return
    seen = []

    def backend(gm: torch.fx.GraphModule, inputs: list[torch.Tensor]) -> object:
        seen.append(conveyor.dynamo.conveyor_backend(gm, inputs))
        return seen[-1]

    run = torch.compile(fn, backend=backend)
    run(torch.ones(2), torch.ones(2))
    x = torch.ones(2)
    run(x, x.detach())  # dynamo's guards hold; the call's signature (one storage) is not the lowering's
    assert len(seen) == 1 and len(seen[0].entries) == 1
    assert all(isinstance(k, DynamoKey) for k in seen[0].entries)
    torch._dynamo.reset()
