"""conveyor's graphs and compile times in torch's structured trace, read
back with tlparse (Note [Structured trace] in
``conveyor.protocol.structured_trace``)."""

import html
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import conveyor
import pytest
import torch
from conveyor.protocol import structured_trace

PROGRAM = textwrap.dedent("""
    import torch, conveyor

    def f(x, y):
        return (x.sin() * y).sum()

    a = torch.ones(3, requires_grad=True)
    g = torch.compile(f, backend="conveyor")
    g(a, torch.ones(3)).backward()
    g(a, a.detach())  # dynamo's guards pass, conveyor's key does not: compiled at run time, filed under [0/0]
    conveyor.compile(torch.nn.Linear(4, 4), cache=False)(torch.ones(2, 4)).sum().backward()
""")

SHIPPED = ("capture", "dedupe", "synthetic_base", "functionalize")


def _tlparse() -> str | None:
    beside = Path(sys.executable).parent / "tlparse"
    return str(beside) if beside.exists() else shutil.which("tlparse")


@pytest.fixture(scope="module")
def trace_dir(tmp_path_factory):
    """A TORCH_TRACE folder of PROGRAM run with conveyor's shipped stages."""
    folder = tmp_path_factory.mktemp("torch_trace")
    env = {**os.environ, "TORCH_TRACE": str(folder), "CONVEYOR_AUTOLOAD": "1"}
    env.pop("CONVEYOR_BACKEND", None)
    done = subprocess.run([sys.executable, "-c", PROGRAM], env=env, capture_output=True, text=True, timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    return folder


def _artifacts_in_raw_log(folder: Path) -> list[tuple[str, str]]:
    """``(compile id, artifact name)`` of every artifact in the raw trace files."""
    found = []
    for log in folder.iterdir():
        for line in log.read_text().splitlines():
            m = re.match(r"^V\S+ \S+ \d+ \S+\] (\{.*\})$", line)
            if m is None:
                continue
            record = json.loads(m.group(1))
            if "artifact" in record:
                cid = f"{record.get('frame_id', '-')}/{record.get('frame_compile_id', '-')}"
                found.append((cid, record["artifact"]["name"]))
    return found


def test_raw_trace_holds_each_stamp_and_the_times_under_dynamos_compile_id(trace_dir):
    found = _artifacts_in_raw_log(trace_dir)
    dynamo = [name for cid, name in found if cid == "0/0"]
    standalone = [name for cid, name in found if cid == "-/-"]
    for names in (dynamo, standalone):
        assert [n for n in names if n.startswith("conveyor_")][:4] == [f"conveyor_{s}_forward" for s in SHIPPED]
        assert "conveyor_autograd_joint_forward" in names and "conveyor_eager_backward" in names
        assert "conveyor_compile_times" in names
    # the run-time specialization (inputs sharing storage): a second set under [0/0]
    assert dynamo.count("conveyor_capture_forward") == 2 and dynamo.count("conveyor_compile_times") == 2


@pytest.mark.skipif(_tlparse() is None, reason="tlparse is not installed (pip install tlparse)")
def test_tlparse_report_lists_conveyors_artifacts_beside_dynamos(trace_dir, tmp_path):
    out = tmp_path / "report"
    [log] = trace_dir.iterdir()  # one process, one log
    done = subprocess.run(
        [_tlparse(), str(log), "-o", str(out), "--no-browser", "--overwrite"],
        capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stderr
    index = html.unescape(re.sub(r"<[^>]+>", "", (out / "index.html").read_text()))
    products = index[index.index("Build products below:") :]
    dynamo = products[products.index("[0/0]") : products.index("[-/-]")]
    assert "dynamo_output_graph" in dynamo
    for name in ("conveyor_capture_forward", "conveyor_autograd_joint_forward", "conveyor_eager_backward"):
        assert f"-_0_0_0/{name}_" in dynamo
        assert f"-_-_-_-/{name}_" in products[products.index("[-/-]") :]
    [times] = sorted((out / "-_-_-_-").glob("conveyor_compile_times_*.json"))
    report = json.loads(times.read_text())
    assert report["program"] == "Linear" and report["summary"].startswith("compiled Linear (forward, backward) in ")
    assert {r["stage"] for r in report["runs"]} >= {"autograd", "eager"}
    graph = next((out / "-_0_0_0").glob("conveyor_autograd_backward_*.txt")).read_text()
    assert graph.startswith("# after autograd (backward) in ") and "def forward(" in graph


def double(x):
    return x * 2


def test_nothing_is_built_when_tracing_is_off(monkeypatch):
    calls = []

    class NoHandlers:
        handlers = []

    monkeypatch.setattr(structured_trace, "probe", lambda: (lambda *a, **k: calls.append(a), NoHandlers, frozenset()))
    monkeypatch.setattr(structured_trace, "artifact_name", lambda g: pytest.fail("a name was built"))
    conveyor.compile(double, cache=False)(torch.ones(2))
    assert calls == []


def test_a_torch_without_structured_trace_compiles_as_before(monkeypatch):
    monkeypatch.setattr(structured_trace, "probe", lambda: None)
    torch.testing.assert_close(conveyor.compile(double, cache=False)(torch.ones(2)), torch.full((2,), 2.0))


def test_emitted_with_only_the_keywords_the_installed_torch_takes(monkeypatch):
    calls = []

    class Handlers:
        handlers = [object()]

    def emit(name, metadata_fn, payload_fn):  # an older signature: no compile_id, no expect_trace_id
        calls.append((name, metadata_fn(), payload_fn()))

    monkeypatch.setattr(structured_trace, "probe", lambda: (emit, Handlers, frozenset({"metadata_fn", "payload_fn"})))
    conveyor.compile(double, cache=False)(torch.ones(2))
    names = [meta["name"] for _, meta, _ in calls]
    assert names == ["conveyor_capture_forward", "conveyor_eager_forward", "conveyor_compile_times"]
    assert calls[0][2].startswith("# after capture (forward) in ")
    assert json.loads(calls[-1][2])["program"] == "double"


def test_probe_finds_the_installed_torchs_channel():
    structured_trace.probe.cache_clear()
    found = structured_trace.probe()
    assert found is not None and callable(found[0]) and {"metadata_fn", "payload_fn"} <= found[2]
