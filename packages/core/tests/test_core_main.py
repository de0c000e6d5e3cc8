import subprocess
import sys


def test_python_dash_m_conveyor_is_the_conveyor_command():
    done = subprocess.run([sys.executable, "-m", "conveyor", "stages"], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "pipeline:" in done.stdout and "eager" in done.stdout
    bad = subprocess.run([sys.executable, "-m", "conveyor", "stages", "--backend", "nope"], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "unknown backend 'nope'" in bad.stderr
