"""Compiling recorded launches with the real Triton compiler for CUDA
targets, in worker processes (Note [Ahead-of-time check] in
``conveyor_triton.aot``).

:func:`compile_launches` deals the (launch, target) jobs to processes that
run :mod:`conveyor_triton.aot_worker` as a script with ``TRITON_INTERPRET=0``
(Triton's interpreter choice is fixed at its first import), reads the PTX
and ptxas's report each returns (:func:`conveyor_triton.aot_ptx.ptx_stats`)
into a :class:`Result`, and restarts the rest of a batch whose process died
(the job it died on fails, naming the exit status).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from conveyor_triton.aot_ptx import PtxStats, ptx_stats
from conveyor_triton.aot_record import Launch

#: CUDA targets the check compiles for by default (compute capability)
ARCHS: tuple[int, ...] = (90, 80)

#: the compiler process's script
_WORKER = Path(__file__).resolve().with_name("aot_worker.py")


@dataclass(frozen=True)
class Result:
    """One launch compiled for one target: stats, or the error."""

    key: str
    name: str
    arch: int
    stats: PtxStats | None = None
    error: str | None = None
    seconds: float = 0.0

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, d: Mapping[str, Any]) -> Result:
        stats = d.get("stats")
        return cls(**{**d, "stats": PtxStats(**stats) if stats is not None else None})


def errors(results: Iterable[Result]) -> str:
    """The failed compiles, one paragraph each (kernel, target, error)."""
    return "\n\n".join(f"{r.name} (sm_{r.arch}): {r.error}" for r in results if r.error)


def default_workers() -> int:
    """``CONVEYOR_AOT_WORKERS``, else half the CPUs (at least 1, at most 8):
    the compiles are CPU-bound and the machines that run tests are shared."""
    env = os.environ.get("CONVEYOR_AOT_WORKERS")
    if env:
        return max(1, int(env))
    return max(1, min(8, (os.cpu_count() or 1) // 2))


def _worker_env(cache_dir: str) -> dict[str, str]:
    env = dict(os.environ)
    env["TRITON_INTERPRET"] = "0"
    env["TRITON_DUMP_PTXAS_LOG"] = "1"  # registers and spills
    env["TRITON_CACHE_DIR"] = cache_dir  # fresh: a cache hit has no ptxas report
    env.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton 3.9's default, without its notice
    env.pop("TRITON_ALWAYS_COMPILE", None)
    return env


def _result(launch: Launch, arch: int, done: dict[str, Any]) -> Result:
    """The :class:`Result` of a worker's line for ``launch`` on ``sm_<arch>``: its PTX read."""
    if done.get("error") is not None:
        return Result(launch.key, launch.name, arch, error=done["error"], seconds=done["seconds"])
    stats = ptx_stats(done["ptx"], done["ptxas"], done["shared"])
    return Result(launch.key, launch.name, arch, stats=stats, seconds=done["seconds"])


def compile_launches(
    launches: Iterable[Launch],
    archs: Sequence[int] = ARCHS,
    workers: int | None = None,
    timeout: float | None = None,
) -> list[Result]:
    """Compile every launch for every target in ``workers`` processes (default
    :func:`default_workers`); a worker that dies fails the kernel it was
    compiling and the rest are compiled by a new one. Results come in the
    order of ``launches`` x ``archs``."""
    jobs = [(la, arch) for la in dict.fromkeys(launches) for arch in archs]
    if not jobs:
        return []
    n = max(1, min(workers or default_workers(), len(jobs)))
    # the longest sources first, dealt round-robin: the workers finish together
    order = sorted(range(len(jobs)), key=lambda i: -len(jobs[i][0].source))
    chunks = [[order[j] for j in range(w, len(order), n)] for w in range(n)]
    results: dict[int, Result] = {}
    with tempfile.TemporaryDirectory(prefix="conveyor-aot-") as tmp:
        pending = [c for c in chunks if c]
        round_ = 0
        while pending:
            procs = []
            for w, chunk in enumerate(pending):
                base = Path(tmp) / f"{round_}-{w}"
                base.mkdir()
                (base / "jobs.json").write_text(
                    json.dumps(
                        [{"id": i, "arch": jobs[i][1], "key": jobs[i][0].key, "launch": jobs[i][0].to_json()} for i in chunk]
                    )
                )
                # run as a script: the worker needs Triton alone, not conveyor's packages
                cmd = [sys.executable, str(_WORKER), str(base)]
                procs.append(
                    (chunk, base, subprocess.Popen(cmd, env=_worker_env(str(base / "cache")),
                                                   stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
                )
            pending = []
            for chunk, base, proc in procs:
                try:
                    out, _ = proc.communicate(timeout=timeout)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    out, _ = proc.communicate()
                done = base / "results.jsonl"
                if done.exists():
                    for line in done.read_text().splitlines():
                        if line.strip():
                            d = json.loads(line)
                            i = d["id"]
                            results[i] = _result(jobs[i][0], jobs[i][1], d)
                rest = [i for i in chunk if i not in results]
                if rest:
                    la, arch = jobs[rest[0]]
                    tail = out.decode(errors="replace")[-3000:]
                    results[rest[0]] = Result(
                        la.key, la.name, arch,
                        error=f"the compiler process ended (exit status {proc.returncode}) while compiling it:\n{tail}",
                    )
                    if rest[1:]:
                        pending.append(rest[1:])
            round_ += 1
    return [results[i] for i in range(len(jobs))]


#: a small kernel known to compile: a batch that includes it tells "this
#: machine cannot compile for CUDA" apart from a bad kernel (:func:`unavailable`)
PROBE = Launch(
    name="aot_probe",
    source=(
        "import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
        "def aot_probe(x, n, XBLOCK: tl.constexpr):\n"
        "    i = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)\n"
        "    tl.store(x + i, tl.load(x + i, mask=i < n) + 1, mask=i < n)\n"
    ),
    signature=(("x", "*fp32"), ("n", "i32"), ("XBLOCK", "constexpr")),
    constexprs=(((2,), 128),),
    attrs=(((0,), (("tt.divisibility", 16),)),),
)


def cannot_compile(probe_result: Result | None) -> str | None:
    """The skip reason when :data:`PROBE` did not compile (None when it did)."""
    if probe_result is None or probe_result.error is None:
        return None
    lines = probe_result.error.strip().splitlines() or ["?"]
    return f"Triton's CUDA backend cannot compile here: {lines[-1]}"


@functools.cache
def unavailable() -> str | None:
    """Why kernels cannot be compiled for CUDA here (None when they can):
    :data:`PROBE` compiled by a worker for sm_80."""
    try:
        from triton.backends import backends
    except ImportError as exc:
        return f"Triton is not installed: {exc}"
    if "nvidia" not in backends:
        return f"Triton has no CUDA backend here (backends: {sorted(backends)})"
    try:
        (r,) = compile_launches([PROBE], archs=(80,), workers=1, timeout=300)
    except Exception as exc:  # noqa: BLE001
        return f"{type(exc).__name__}: {exc}"
    return cannot_compile(r)
