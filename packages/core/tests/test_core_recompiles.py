"""Recompile reasons and cache hits/misses at INFO on the ``conveyor`` logger
(Note [Recompile reasons] in ``conveyor.runtime.recompiles``), on both entry
points."""

import logging
import re

import conveyor
import pytest
import torch
from conveyor.runtime import recompiles


def scale(x, n):
    return x * n


def lines(caplog, start=("compiling ", "recompiling ", "memory cache", "disk cache")):
    return [r.getMessage() for r in caplog.records if r.name == "conveyor" and r.getMessage().startswith(start)]


def test_sizes_then_dtype_then_value_then_grad_mode(caplog):
    c = conveyor.compile(scale, cache=False)
    with caplog.at_level(logging.INFO, logger="conveyor"):
        c(torch.ones(8), 2)
        c(torch.ones(8), 2)  # a guard serves it: nothing logged
        c(torch.ones(16), 2)
        c(torch.ones(32), 2)  # the symbolic entry's guards hold: its first reuse
        c(torch.ones(1), 2)  # size 1 breaks them
        c(torch.ones(8, dtype=torch.float64), 2)
        c(torch.ones(8), 3)
        with torch.no_grad():
            c(torch.ones(8), 2)
    got = lines(caplog)
    assert re.fullmatch(r"compiling scale: first call \(memory cache miss, key [0-9a-f]{12}; static sizes\)", got[0])
    assert got[1].startswith("recompiling scale: input x: size[0] 8 -> 16 (memory cache miss, key ")
    assert got[1].endswith("; symbolic sizes in x dim 0)")
    assert re.fullmatch(r"memory cache hit scale: key [0-9a-f]{12} \(an entry with symbolic sizes whose size guards hold\)", got[2])
    assert got[3].startswith("recompiling scale: input x: size[0] 8 -> 1 ")
    assert "the size guards of 1 symbolic entry fail: " in got[3]
    assert got[4].startswith("recompiling scale: input x: dtype torch.float32 -> torch.float64 ")
    assert got[5].startswith("recompiling scale: non-tensor input n: 2 -> 3 ")
    assert got[6].startswith("recompiling scale: grad mode on -> off ")
    assert len(got) == 7
    assert len(set(re.findall(r"miss, key ([0-9a-f]{12})", " ".join(got)))) == 6  # one key per compile


def test_module_parameters_and_training_flags_are_named(caplog):
    model = torch.nn.Linear(4, 2)
    c = conveyor.compile(model, cache=False, dynamic=False)
    x = torch.ones(3, 4)
    with caplog.at_level(logging.INFO, logger="conveyor"):
        c(x)
        model.weight.requires_grad_(False)
        c(x)
        model.eval()
        c(x)
    got = lines(caplog)
    assert got[1].startswith("recompiling Linear: input parameter/buffer weight: requires_grad True -> False ")
    assert got[1].endswith("; static sizes (dynamic=False))")
    assert got[2].startswith("recompiling Linear: module training flags changed (.train()/.eval()) ")


def test_inputs_that_start_sharing_storage(caplog):
    c = conveyor.compile(lambda a, b: a + b, cache=False)
    x = torch.ones(4)
    with caplog.at_level(logging.INFO, logger="conveyor"):
        c(x, torch.ones(4))
        c(x, x)
    assert "which inputs share storage (none) -> (b~a)" in lines(caplog)[1]


def test_disk_cache_miss_then_hit(caplog, tmp_path, monkeypatch):
    monkeypatch.setenv("CONVEYOR_CACHE_DIR", str(tmp_path))
    x = torch.ones(4)
    with caplog.at_level(logging.INFO, logger="conveyor"):
        conveyor.compile(scale, cache=True)(x, 2)
        conveyor.compile(scale, cache=True)(x, 2)  # a new object: memory miss, disk hit
    got = lines(caplog)
    miss = next(m for m in got if m.startswith("disk cache miss "))
    hit = next(m for m in got if m.startswith("disk cache hit "))
    key = re.match(r"disk cache miss ([0-9a-f]{12}): compiling the forward$", miss).group(1)
    assert hit.startswith(f"disk cache hit {key}: loaded {tmp_path}")


def test_behind_dynamo_the_reason_names_dynamos_source(caplog):
    torch._dynamo.reset()
    c = torch.compile(lambda x, y: x * y, backend="conveyor")
    a = torch.ones(8, requires_grad=True)
    with caplog.at_level(logging.INFO, logger="conveyor"):
        c(a, torch.ones(8))
        c(a, a.detach())  # dynamo's guards pass; conveyor's key (sharing) does not
        c(a, a.detach())  # the static entry's first reuse
    got = lines(caplog)
    first = re.fullmatch(
        r"compiling (dynamo graph \d+/\d+): first call \(memory cache miss, key [0-9a-f]{12}; at dynamo's lowering, .*\)",
        got[0],
    )
    name = first.group(1)
    assert got[1].startswith(f"recompiling {name}: which inputs share storage (none) -> (L['y']~L['x']) (memory cache")
    assert got[2].startswith(f"memory cache hit {name}: key ")


def test_nothing_is_hashed_or_compared_when_info_is_off(caplog, monkeypatch):
    def boom(*args, **kwargs):
        raise AssertionError("the recompile log ran with INFO off")

    monkeypatch.setattr(recompiles, "short_hash", boom)
    monkeypatch.setattr(recompiles, "leaf_names", boom)
    c = conveyor.compile(scale, cache=False)
    with caplog.at_level(logging.WARNING, logger="conveyor"):
        for n in (4, 8, 1):
            c(torch.ones(n), 2)
    assert c.compiles == 3


@pytest.mark.parametrize(
    ("old", "new", "said"),
    [
        ((torch.Tensor, torch.float32, "cpu", (2, 3), (3, 1), 0, False, True),
         (torch.Tensor, torch.float32, "cpu", (2, 3), (1, 2), 0, False, True),
         ["input x: stride[0] 3 -> 1", "input x: stride[1] 1 -> 2"]),
        ((torch.Tensor, torch.float32, "cpu", (2,), (1,), 0, False, True),
         (torch.nn.Parameter, torch.float32, "cpu", (2,), (1,), 4, False, True),
         ["input x: type Tensor -> Parameter", "input x: storage_offset 0 -> 4"]),
        ((torch.Tensor, torch.float32, "cpu", (2,), (1,), 0, False, True),
         (torch.Tensor, torch.float32, "cpu", (2, 1), (1, 1), 0, False, True),
         ["input x: size (2,) -> (2, 1)", "input x: stride (1,) -> (1, 1)"]),
        ("int", "float", ["input x: int -> float"]),
    ],
)
def test_input_changes(old, new, said):
    assert recompiles.input_changes(old, new, "x") == said
