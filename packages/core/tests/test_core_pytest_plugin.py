"""The shipped pytest plugin (``conveyor.testing.pytest_plugin``) is loaded
into every pytest run of a project that installs conveyor: it leaves the
environment alone unless the project asks for an isolated compile cache."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

_TEST = """
import os

def test_env():
    print("CACHE=" + repr(os.environ.get("CONVEYOR_CACHE")) + " DIR=" + repr(os.environ.get("CONVEYOR_CACHE_DIR")))
"""


def _run(folder: Path, ini: str) -> str:
    (folder / "pytest.ini").write_text(f"[pytest]\n{ini}\n")
    (folder / "test_env.py").write_text(_TEST)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONVEYOR_CACHE")}
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-s", "-q", "-p", "no:cacheprovider", "test_env.py"],
        cwd=folder, env=env, capture_output=True, text=True, timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return next(line for line in done.stdout.splitlines() if "CACHE=" in line)


@pytest.mark.parametrize("asked", [False, True])
def test_the_plugin_sets_the_cache_environment_only_when_asked(tmp_path: Path, asked: bool) -> None:
    line = _run(tmp_path, "conveyor_isolated_cache = true" if asked else "")
    if asked:
        assert "CACHE='0'" in line and "conveyor-test-cache-" in line
    else:
        assert line.endswith("CACHE=None DIR=None")

# Note [Tests run once in CI]: this module checks machinery that is the same on every torch;
# .ci/run's second torch leaves it out (-m "not once")
pytestmark = pytest.mark.once
