import subprocess
import sys

import pytest


def test_python_dash_m_conveyor_is_the_conveyor_command():
    done = subprocess.run([sys.executable, "-m", "conveyor", "stages"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "pipeline:" in done.stdout and "eager" in done.stdout
    bad = subprocess.run([sys.executable, "-m", "conveyor", "stages", "--backend", "nope"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "unknown backend 'nope'" in bad.stderr

# Note [Tests run once in CI]: this module checks machinery that is the same on every torch;
# .ci/run's second torch leaves it out (-m "not once")
pytestmark = pytest.mark.once
