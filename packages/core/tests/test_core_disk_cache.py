"""The persistent compile cache (conveyor.runtime.disk_cache): hits, a miss on each
part of the key, corrupt and stale entries, concurrent writers, the switch."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import conveyor
import pytest
import torch
from conveyor.analysis.overlap import Layout
from conveyor.frontend.capture import trace_user
from conveyor.protocol import artifacts
from conveyor.protocol.config import resolve
from conveyor.protocol.pipeline import Pipeline
from conveyor.protocol.stage import Request
from conveyor.runtime import disk_cache, disk_key
from conveyor.testing import check
from torch._subclasses.fake_tensor import FakeTensorMode


class Runs:
    """Counts pipeline runs (a disk hit runs none)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        original = Pipeline.compile

        def counting(pipeline: Pipeline, request: Request):  # type: ignore[no-untyped-def]
            self.count += 1
            return original(pipeline, request)

        monkeypatch.setattr(Pipeline, "compile", counting)


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> Runs:
    return Runs(monkeypatch)


def entries(folder: Path) -> list[Path]:
    return sorted(folder.glob("*/*.program"))


def fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a * b).sin() + a


def other_fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a * b).cos() + a


def compiled(f, folder: Path, **options):  # type: ignore[no-untyped-def]
    return conveyor.compile(f, cache=True, cache_dir=str(folder), **options)


def args(*shape: int, dtype: torch.dtype = torch.float32, requires_grad: bool = False) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(0)
    return tuple(torch.randn(*shape, dtype=dtype, requires_grad=requires_grad) for _ in range(2))


# -- hits -----------------------------------------------------------------------
def test_a_second_compile_loads_the_program_and_matches_eager(tmp_path: Path, runs: Runs) -> None:
    check(fn, *args(4, 5), compile=lambda f: compiled(f, tmp_path))
    assert runs.count == 1 and len(entries(tmp_path)) == 1
    check(fn, *args(4, 5), compile=lambda f: compiled(f, tmp_path))
    assert runs.count == 1, "the second compile ran the pipeline again"


def test_a_training_module_with_every_installed_stage_hits(tmp_path: Path, runs: Runs) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8), torch.nn.GELU(), torch.nn.Linear(8, 2))
    x = torch.randn(3, 8)
    check(model, x, compile=lambda m: compiled(m, tmp_path, autoload=True))
    stored = runs.count
    assert stored >= 1 and entries(tmp_path), "the training program was not stored"
    first = compiled(model, tmp_path, autoload=True)
    first(x).sum().backward()
    graphs = conveyor.last_graphs(first)
    check(model, x, compile=lambda m: compiled(m, tmp_path, autoload=True))
    assert runs.count == stored, "a new compile of the same module ran the pipeline"
    # the stage graphs come back with the program: same stages, same code
    second = compiled(model, tmp_path, autoload=True)
    second(x).sum().backward()
    loaded = conveyor.last_graphs(second)
    assert [(g.stage, g.label, g.step) for g in loaded] == [(g.stage, g.label, g.step) for g in graphs]
    assert [g.graph.code for g in loaded] == [g.graph.code for g in graphs]


def test_behind_dynamo_a_recompile_hits(tmp_path: Path, runs: Runs) -> None:
    options = {"cache": True, "cache_dir": str(tmp_path)}
    a, b = args(6)
    torch._dynamo.reset()
    out1 = torch.compile(fn, backend="conveyor", options=options)(a, b)
    n = runs.count
    torch._dynamo.reset()
    out2 = torch.compile(fn, backend="conveyor", options=options)(a, b)
    torch._dynamo.reset()
    assert runs.count == n and entries(tmp_path)
    torch.testing.assert_close(out1, fn(a, b))
    torch.testing.assert_close(out2, fn(a, b))


# -- a miss on each part of the key ----------------------------------------------
def _key(f, inputs, **options):  # type: ignore[no-untyped-def]
    """The disk key of ``f``'s program for ``inputs`` under ``options``."""
    pipeline = Pipeline(resolve({"cache": True, **options}))
    fake_mode = FakeTensorMode()
    fakes = [fake_mode.from_tensor(t, static_shapes=True) for t in inputs]
    graph = trace_user(lambda *xs: (f(*xs),), fakes, fake_mode).graph
    key, why = disk_key.program_key(pipeline, Request(graph, tuple(fakes), fake_mode, torch.is_grad_enabled()))
    assert key is not None, why
    return key


def test_the_key_changes_with_each_part(monkeypatch: pytest.MonkeyPatch) -> None:
    base = _key(fn, args(4, 5))
    assert _key(fn, args(4, 5)) == base, "the key is not deterministic"
    a, b = args(4, 5)
    variants = {
        "graph": _key(other_fn, (a, b)),
        "sizes": _key(fn, args(4, 6)),
        "dtype": _key(fn, args(4, 5, dtype=torch.float64)),
        "strides": _key(fn, (a.t().contiguous().t(), b)),
        "storage offset": _key(fn, (torch.randn(30)[10:].view(4, 5), b)),
        "requires_grad": _key(fn, args(4, 5, requires_grad=True)),
        "storage sharing": _key(fn, (a, a)),
        "stage options": _key(fn, (a, b), autoload=True, stages={"autograd": {"partitioner": "save_eager"}}),
        "stage set": _key(fn, (a, b), autoload=True),
    }
    monkeypatch.setenv("CONVEYOR_TRITON_LAUNCH_FOR", "cuda")  # read by the triton stage's cache_key
    variants["stage key"] = _key(fn, (a, b), autoload=True, backend="triton")
    monkeypatch.delenv("CONVEYOR_TRITON_LAUNCH_FOR")
    variants["backend"] = _key(fn, (a, b), autoload=True, backend="triton")
    with torch.no_grad():
        variants["grad mode"] = _key(fn, (a, b))
    with torch.autocast("cpu", dtype=torch.bfloat16):
        variants["autocast"] = _key(fn, (a, b))
    monkeypatch.setattr(disk_key, "environment", lambda dists: "another torch or conveyor version")
    variants["versions"] = _key(fn, (a, b))
    monkeypatch.undo()
    monkeypatch.setattr(disk_key, "FORMAT_VERSION", disk_key.FORMAT_VERSION + 1)
    variants["format version"] = _key(fn, (a, b))
    monkeypatch.undo()
    assert base not in variants.values(), [k for k, v in variants.items() if v == base]
    assert len(set(variants.values())) == len(variants)


def test_a_dataclass_is_plain_data_by_its_fields() -> None:
    # a stage key may be a frozen record (synthetic_base's SharedStorage holds Layouts)
    keyed = disk_key._plain(Layout(4, (5,), (1,), 0), "a stage key")
    assert keyed == disk_key._plain(Layout(4, (5,), (1,), 0), "a stage key")
    assert keyed != disk_key._plain(Layout(4, (5,), (1,), 1), "a stage key")
    with pytest.raises(disk_key.Unkeyable):
        disk_key._plain(object(), "a stage key")


def test_a_graph_constant_is_keyed_by_value() -> None:
    def with_constant(value: float):  # type: ignore[no-untyped-def]
        def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return a + torch.tensor([value, 2.0, 3.0, 4.0, 5.0])

        return f

    assert _key(with_constant(1.0), args(4, 5)) != _key(with_constant(7.0), args(4, 5))


def test_an_edited_editable_source_changes_the_environment(tmp_path: Path) -> None:
    (tmp_path / "stage.py").write_text("x = 1\n")
    before = disk_key._fingerprint(tmp_path)
    (tmp_path / "stage.py").write_text("x = 22\n")
    assert disk_key._fingerprint(tmp_path) != before
    installed = disk_key.environment(("conveyor-core",))
    assert installed == disk_key.environment(("conveyor-core",))


def test_a_checkout_imported_before_the_editable_source_is_fingerprinted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Note [Fingerprinting what is imported]: a worktree first on sys.path runs its own code
    name = "conveyor_fingerprint_probe"
    source, worktree = tmp_path / "src", tmp_path / "worktree"
    for root in (source, worktree):
        (root / name).mkdir(parents=True)
        (root / name / "__init__.py").write_text("x = 1\n")
    monkeypatch.syspath_prepend(str(source))
    installed = disk_key._imported_fingerprint(source)
    assert installed == (disk_key._fingerprint(source),)
    monkeypatch.syspath_prepend(str(worktree))
    shadowed = disk_key._imported_fingerprint(source)
    assert shadowed != installed
    (worktree / name / "__init__.py").write_text("x = 22\n")
    edited = disk_key._imported_fingerprint(source)
    assert edited != shadowed
    # every top-level name shadowed: the install's files are not run, an edit there changes nothing
    (source / name / "__init__.py").write_text("x = 333\n")
    assert disk_key._imported_fingerprint(source) == edited
    # a second top-level name imported from the install: its folder is fingerprinted again
    (source / "conveyor_fingerprint_other.py").write_text("y = 1\n")
    both = disk_key._imported_fingerprint(source)
    assert both[0] == disk_key._fingerprint(source) and both[1:] == edited
    assert name not in sys.modules  # looked up, not imported


def test_a_miss_compiles_and_stores_a_second_entry(tmp_path: Path, runs: Runs) -> None:
    compiled(fn, tmp_path)(*args(4, 5))
    compiled(fn, tmp_path)(*args(4, 6))
    compiled(other_fn, tmp_path)(*args(4, 5))
    assert runs.count == 3 and len(entries(tmp_path)) == 3


# -- what is not stored ----------------------------------------------------------
def test_symbolic_sizes_are_not_stored(tmp_path: Path) -> None:
    compiled(fn, tmp_path, dynamic=True)(*args(4, 5))
    assert entries(tmp_path) == []


def test_the_switch_and_the_folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    conveyor.compile(fn, cache=False, cache_dir=str(tmp_path))(*args(4, 5))
    assert entries(tmp_path) == []
    monkeypatch.setenv("CONVEYOR_CACHE", "1")
    monkeypatch.setenv("CONVEYOR_CACHE_DIR", str(tmp_path / "env"))
    conveyor.compile(fn)(*args(4, 5))
    assert len(entries(tmp_path / "env")) == 1
    monkeypatch.setenv("CONVEYOR_CACHE", "0")
    assert resolve().cache is False
    (tmp_path / "pyproject.toml").write_text('[tool.conveyor]\ncache = false\ncache_dir = "here"\n')
    monkeypatch.delenv("CONVEYOR_CACHE")
    monkeypatch.delenv("CONVEYOR_CACHE_DIR")
    config = resolve(start=tmp_path)
    assert config.cache is False and config.cache_dir == str(tmp_path / "here")
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    assert disk_cache.cache_dir(resolve({"cache_dir": None}, start=tmp_path)) == (
        Path.home() / ".cache" / "conveyor" / "programs"
    )


def test_a_compile_that_warns_is_not_stored_and_warns_again(tmp_path: Path) -> None:
    pipeline = Pipeline(resolve({"cache": True, "cache_dir": str(tmp_path)}))
    fake_mode = FakeTensorMode()
    fakes = [fake_mode.from_tensor(t, static_shapes=True) for t in args(4, 5)]
    request = Request(trace_user(lambda *xs: (fn(*xs),), fakes, fake_mode).graph, tuple(fakes), fake_mode)

    def warning_compile(r: Request):  # type: ignore[no-untyped-def]
        warnings.warn("a stage fell back", UserWarning, stacklevel=1)
        return pipeline.compile(r)

    for _ in range(2):
        with pytest.warns(UserWarning, match="a stage fell back"):
            disk_cache.compile_cached(pipeline, request, warning_compile)
    assert entries(tmp_path) == []


def test_an_unpicklable_program_is_not_stored(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    path = disk_cache.entry_path(tmp_path, "ab" * 32)
    with caplog.at_level(logging.DEBUG, logger="conveyor.disk_cache"):
        assert not disk_cache.store(path, (lambda args: args, ()), "ab" * 32)
    assert not path.exists() and "cannot pickle" in caplog.text


def test_artifacts_keep_node_names_and_refuse_stray_tensors() -> None:
    gm = torch.fx.symbolic_trace(lambda x: torch.relu(x) + 1)
    gm.graph.nodes.__iter__().__next__().meta["conveyor_mark"] = True
    copy = artifacts.loads(artifacts.dumps(gm))
    assert [n.name for n in copy.graph.nodes] == [n.name for n in gm.graph.nodes]
    assert next(iter(copy.graph.nodes)).meta == {"conveyor_mark": True}
    x = torch.randn(3)
    torch.testing.assert_close(copy(x), gm(x))
    with pytest.raises(artifacts.Unpicklable, match="outside a graph's constants"):
        artifacts.dumps((gm, torch.ones(2)))
    with pytest.raises(artifacts.Unpicklable, match="outside a graph's constants"):
        artifacts.dumps(FakeTensorMode().from_tensor(torch.ones(2)))


# -- corrupt and stale entries -----------------------------------------------------
@pytest.mark.parametrize(
    "damage",
    ["truncated", "garbled payload", "garbled header", "empty", "other format", "not a program"],
)
def test_a_corrupt_entry_is_rebuilt(tmp_path: Path, runs: Runs, damage: str) -> None:
    compiled(fn, tmp_path)(*args(4, 5))
    (path,) = entries(tmp_path)
    good = path.read_bytes()
    header = len(good) - len(good.split(b"\n", 1)[1]) + 4 + 32 + 32  # magic, version, key, digest
    if damage == "truncated":
        path.write_bytes(good[: len(good) // 2])
    elif damage == "garbled payload":
        path.write_bytes(good[:header] + bytes(b ^ 0x5A for b in good[header : header + 64]) + good[header + 64 :])
    elif damage == "garbled header":
        path.write_bytes(b"x" + good[1:])
    elif damage == "empty":
        path.write_bytes(b"")
    elif damage == "other format":
        magic = good.split(b"\n", 1)[0] + b"\n"
        path.write_bytes(magic + (disk_key.FORMAT_VERSION + 1).to_bytes(4, "little") + good[len(magic) + 4 :])
    else:  # a valid file whose payload unpickles to something else
        import hashlib

        payload = artifacts.dumps(("not", "a program"))
        magic = good.split(b"\n", 1)[0] + b"\n"
        version_and_key = good[len(magic) : len(magic) + 4 + 32]
        path.write_bytes(magic + version_and_key + hashlib.sha256(payload).digest() + payload)
    damaged = path.read_bytes()
    a, b = args(4, 5)
    torch.testing.assert_close(compiled(fn, tmp_path)(a, b), fn(a, b))
    assert runs.count == 2, "a damaged entry was used instead of compiling again"
    # rewritten: a fresh entry (its bytes differ from the first by the stamps' compile times)
    assert path.read_bytes() != damaged and len(path.read_bytes()) > header, "the damaged entry was not rewritten"
    compiled(fn, tmp_path)(a, b)
    assert runs.count == 2


def test_an_entry_copied_under_another_programs_name_is_not_trusted(tmp_path: Path, runs: Runs) -> None:
    compiled(fn, tmp_path)(*args(4, 5))
    compiled(other_fn, tmp_path)(*args(4, 5))
    first, second = entries(tmp_path)
    second.write_bytes(first.read_bytes())  # one program's entry under the other's key
    a, b = args(4, 5)
    torch.testing.assert_close(compiled(fn, tmp_path)(a, b), fn(a, b))
    torch.testing.assert_close(compiled(other_fn, tmp_path)(a, b), other_fn(a, b))
    assert runs.count == 3, "the copied entry was not compiled again"


# -- concurrent writers, and a new process ---------------------------------------------
_WRITER = textwrap.dedent(
    """
    import json, os, sys, time
    from pathlib import Path
    import torch, conveyor
    from conveyor.protocol.pipeline import Pipeline

    runs = []
    original = Pipeline.compile
    Pipeline.compile = lambda self, request: (runs.append(1), original(self, request))[1]
    torch.manual_seed(0)
    model = torch.nn.Sequential(*(torch.nn.Sequential(torch.nn.LayerNorm(32), torch.nn.Linear(32, 32)) for _ in range(4)))
    x = torch.randn(4, 32)
    barrier, n = Path(sys.argv[2]), int(sys.argv[3])  # imports done: compile together
    (barrier / str(os.getpid())).touch()
    deadline = time.time() + 300
    while len(list(barrier.iterdir())) < n and time.time() < deadline:
        time.sleep(0.002)
    step = conveyor.compile(model, cache=True, cache_dir=sys.argv[1])
    out = step(x)
    out.sum().backward()
    expected = torch.nn.Sequential(*(torch.nn.Sequential(torch.nn.LayerNorm(32), torch.nn.Linear(32, 32)) for _ in range(4)))
    expected.load_state_dict(model.state_dict())
    ok = torch.allclose(out, expected(x), atol=1e-6)
    from conveyor.runtime import disk_key
    environment = disk_key.environment(disk_key._stage_distributions(step.pipeline))
    print(json.dumps({"runs": len(runs), "ok": ok, "environment": environment}))
    """
)


def _python(script: str, *argv: str) -> subprocess.Popen[str]:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CONVEYOR_AUTOLOAD": "1"}
    return subprocess.Popen(
        [sys.executable, "-c", script, *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env
    )


def _result(proc: subprocess.Popen[str]) -> dict[str, object]:
    out, err = proc.communicate(timeout=600)
    assert proc.returncode == 0, err[-3000:]
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.slow  # CI time: about 20 s of subprocesses; the single-writer load tests stay
def test_concurrent_writers_then_a_new_process_loads(tmp_path: Path) -> None:
    cache, barrier = tmp_path / "cache", tmp_path / "barrier"
    barrier.mkdir()
    writers = [_python(_WRITER, str(cache), str(barrier), "2") for _ in range(2)]
    results = [_result(p) for p in writers]
    assert all(r["ok"] for r in results), results
    assert entries(cache) and not list(cache.glob("*/.tmp-*")), "a temporary file was left behind"
    reader = _result(_python(_WRITER, str(cache), str(barrier), "0"))
    assert reader["ok"]
    if reader["environment"] == results[0]["environment"]:
        assert reader["runs"] == 0, "a new process did not load what the writers stored"
    else:  # a source file of an editable install changed meanwhile: a miss is right
        assert reader["runs"] == 1
