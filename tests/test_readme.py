"""Every Python block of README.md runs as written, on the README's CPU
setup (issue 23): each in a fresh interpreter, in an empty folder, with the
Hugging Face hub offline, and with ``TRITON_INTERPRET=1`` exactly where the
README tells the reader to set it (the paragraph before the block says so).
Blocks run in Triton's interpreter are marked slow: the README calls it
"exact, slow, for tests only"."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
_FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.M | re.S)


def python_blocks(text: str) -> list[tuple[int, str, bool, list[str]]]:
    """``(line, source, needs the interpreter, what it prints)`` of each
    ```python block. What it prints, where the README says: the paragraph
    after the block begins with "prints `...`", or each ``print(...)`` line
    ends with a comment ``# <output>: ...``."""
    found = []
    for m in _FENCE.finditer(text):
        if m.group(1) != "python":
            continue
        before = text[: m.start()].rstrip("\n")
        paragraph = before[before.rfind("\n\n") + 2 :]
        said = re.match(r"\n*prints `([^`]*)`", text[m.end() :])
        prints = [said.group(1)] if said else re.findall(r"^print\(.*\)\s+# ([^:]+):", m.group(2), re.M)
        line = text.count("\n", 0, m.start()) + 1
        found.append((line, m.group(2), "TRITON_INTERPRET=1" in paragraph, prints))
    return found


BLOCKS = python_blocks(README.read_text())


def test_the_readme_has_python_blocks_and_says_where_triton_needs_its_interpreter():
    assert len(BLOCKS) >= 5
    triton = [line for line, source, _, _ in BLOCKS if 'backend="triton"' in source or "'triton'" in source]
    assert triton and all(interpret for line, _, interpret, _ in BLOCKS if line in triton)


@pytest.mark.parametrize(
    ("source", "interpret", "prints"),
    [
        pytest.param(source, interpret, prints, id=f"line{line}", marks=[pytest.mark.slow] if interpret else [])
        for line, source, interpret, prints in BLOCKS
    ],
)
def test_readme_block_runs(source, interpret, prints, tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update(HF_HUB_OFFLINE="1", OMP_NUM_THREADS="1")
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    done = subprocess.run(
        [sys.executable, "-c", source], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, f"{done.stdout[-2000:]}\n{done.stderr[-4000:]}"
    if prints:
        assert done.stdout.splitlines() == prints

# Note [Tests run once in CI]: this module checks machinery that is the same on every torch;
# .ci/run's second torch leaves it out (-m "not once")
pytestmark = pytest.mark.once
