"""Fixtures for the triton backend tests.

Triton's interpreter must be on before triton is first imported (there is no
GPU here), so it is switched on first of all.

``--aot-check`` (or ``CONVEYOR_AOT_CHECK=1``; ``nox -s triton_aot``) runs the
session with launches configured as on a GPU (Note [GPU launch configuration
on CPU]), records every kernel launch and, at the end, compiles each distinct
kernel with the real Triton compiler for sm_90 and sm_80
(``conveyor_triton.aot``); a compile error fails the session.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from pathlib import Path

os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path.insert(0, str(Path(__file__).parent))  # the shared OpInfo sweep module

from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import conveyor  # noqa: E402
import conveyor_triton.plugin  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from conveyor import Plugins  # noqa: E402
from conveyor_triton import aot, metrics  # noqa: E402

_AOT = pytest.StashKey[tuple[aot.Recorder, contextlib.ExitStack]]()
_AOT_RESULTS = pytest.StashKey[tuple[list[aot.Result], float, str | None]]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--aot-check",
        action="store_true",
        default=False,
        help="compile every kernel the session launches for sm_90 and sm_80 with the real Triton compiler "
        "at the end; a compile error fails the session (also CONVEYOR_AOT_CHECK=1)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "opinfo: the OpInfo sweep (bounded; deselect with -m 'not opinfo')")
    if config.getoption("--aot-check", default=False) or os.environ.get("CONVEYOR_AOT_CHECK", "") not in ("", "0"):
        recorder, stack = aot.Recorder(), contextlib.ExitStack()
        stack.enter_context(metrics.watching_launches(recorder))
        stack.enter_context(aot.gpu_launch_config())
        config.stash[_AOT] = (recorder, stack)


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _AOT not in session.config.stash:
        return
    recorder, stack = session.config.stash[_AOT]
    stack.close()
    start = time.perf_counter()
    results = aot.compile_launches([aot.PROBE, *recorder.launches()], archs=aot.ARCHS)
    skipped = aot.cannot_compile(results[0])
    session.config.stash[_AOT_RESULTS] = (results[len(aot.ARCHS) :], time.perf_counter() - start, skipped)
    if not skipped and (recorder.failures or aot.errors(results)):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if _AOT_RESULTS not in config.stash:
        return
    recorder, _ = config.stash[_AOT]
    results, seconds, skipped = config.stash[_AOT_RESULTS]
    tr = terminalreporter
    tr.section("ahead-of-time compile check (sm_90, sm_80)")
    if skipped:
        tr.write_line(f"skipped: {skipped}")
        return
    for failure in recorder.failures:
        tr.write_line(f"not described: {failure}", red=True)
    s = aot.summarize(results, 90)
    tr.write_line(
        f"{recorder.total} launches, {len(recorder.launches())} distinct kernels compiled for "
        f"{len(aot.ARCHS)} targets in {seconds:.1f} s; sm_90: {s.no_vector} without a vectorized global access "
        f"({s.pct_no_vector:.0f}%), {s.pct_loads_vectorized:.0f}% of global loads vectorized, "
        f"{len(s.spilling)} spilling"
    )
    if s.spilling:  # their sources: kernels/**/<name>.py under the session's --basetemp
        tr.write_line(f"spilling on sm_90: {', '.join(s.spilling)}")
    errs = aot.errors(results)
    if errs:
        tr.write_line(f"{sum(1 for r in results if r.error)} compile errors:", red=True)
        tr.write_line(errs)


@pytest.fixture(autouse=True)
def _kernel_cache(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    """One kernel cache directory for the session, never the user's."""
    monkeypatch.setenv("CONVEYOR_TRITON_CACHE", str(tmp_path_factory.getbasetemp() / "kernels"))


@pytest.fixture
def triton_only(fresh_plugins: Plugins) -> Callable[..., Callable[[Any], conveyor.Compiled]]:
    """``triton_only(**options)``: compile with the triton backend alone, outputs poisoned."""
    fresh_plugins.register(conveyor_triton.plugin, name="triton")

    def make(**options: Any) -> Callable[[Any], conveyor.Compiled]:
        opts = {"poison": True, **options}
        return lambda f: conveyor.compile(f, plugins=fresh_plugins, backend="triton", stages={"triton": opts})

    return make


@pytest.fixture
def errors_raised_on_the_host() -> None:
    """For a test that expects an out-of-range index to raise at the call:
    skipped on CUDA, where eager's error (and the generated kernel's range
    check, Note [Indexes out of range]) is an asynchronous device-side assert
    that ends the process's CUDA context; test_triton_index_bounds.py checks
    that trap in a child process there."""
    if torch.get_default_device().type == "cuda":
        pytest.skip("on CUDA an index out of range is a device-side assert, checked in a child process")


@pytest.fixture
def full_pipeline(installed_plugins: Plugins) -> Callable[[Any], conveyor.Compiled]:
    """Compile with every installed stage and the triton backend."""
    return lambda f: conveyor.compile(f, plugins=installed_plugins, backend="triton", stages={"triton": {"poison": True}})
