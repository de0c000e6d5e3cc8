"""Distributed training through conveyor, against the same training run eagerly.

Each test starts 2 ranks (``distributed_ranks.py`` run as a script, one
subprocess per rank) on gloo over 127.0.0.1 with a free port, a 60 s timeout
on every collective and a wall-clock limit on the whole run, and names the
scenarios they run. Every scenario (in :mod:`distributed_ranks`) trains a
model with the compiled program and an eager copy side by side for 3 steps
(different data on each rank, so the all-reduce matters) and compares, per
step, the losses, the gradients after the all-reduce and the parameters, and
at the end checks that the replicas agree.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

RANKS = Path(__file__).with_name("distributed_ranks.py")
WORLD = 2  # distributed_ranks.WORLD


# ---------------------------------------------------------------- the runner (pytest side)
def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_ranks(*scenarios: str, timeout: float = 300) -> None:
    """Run the scenarios on 2 ranks; fail with the ranks' output if any fails."""
    port = _free_port()
    env = {
        **os.environ,
        "OMP_NUM_THREADS": "1",
        "TRITON_INTERPRET": "1",
        "PYTHONWARNINGS": "ignore::DeprecationWarning",
    }
    procs = [
        subprocess.Popen(
            [sys.executable, str(RANKS), str(rank), str(port), *scenarios],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
        )
        for rank in range(WORLD)
    ]
    outputs: list[str] = []
    try:
        for p in procs:
            outputs.append(p.communicate(timeout=timeout)[0])
    except subprocess.TimeoutExpired:
        for p in procs:
            p.kill()
        pytest.fail(f"distributed scenarios {scenarios} did not end within {timeout} s")
    failed = [(r, p.returncode, out) for r, (p, out) in enumerate(zip(procs, outputs, strict=True)) if p.returncode]
    if failed:
        pytest.fail("\n".join(f"rank {r} exited {rc}:\n{out[-6000:]}" for r, rc, out in failed))
    for scenario in scenarios:
        assert all(f"PASSED {scenario}" in out for out in outputs), outputs


# ---------------------------------------------------------------- the tests
def test_ddp_fsdp2_and_tensor_parallel_through_both_entry_points():
    run_ranks(
        "ddp_dynamo",
        "ddp_standalone",
        "ddp_bucket_sweep",
        "ddp_triton",
        "tp_mlp",
        "fsdp2_dynamo",
        "ddp_compiled_autograd",
    )


@pytest.mark.slow
def test_ddp_variants_and_a_tensor_parallel_transformer_block():
    run_ranks("ddp_compiled_before_wrap", "ddp_no_sync", "ddp_graph_break", "ddp_buffers", "tp_block")
