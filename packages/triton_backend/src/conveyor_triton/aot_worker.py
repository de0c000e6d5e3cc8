"""The ahead-of-time check's compiler process (Note [Ahead-of-time check] in
``conveyor_triton.aot``).

``python aot_worker.py DIR`` compiles each job of ``DIR/jobs.json`` (a
launch as ``conveyor_triton.aot_record.Launch.to_json`` writes it, its key
and a target) with ``triton.compile`` and appends one JSON line per job to
``DIR/results.jsonl`` as it goes: the PTX, ptxas's report and the shared
memory, or the error. The parent (:func:`conveyor_triton.aot_compile.compile_launches`)
reads them; a job with no line is the one the process died on.

It runs as a script and imports Triton and the standard library alone, none
of conveyor: Triton's interpreter is chosen at its first import (here it
must be off, ``TRITON_INTERPRET=0``), and conveyor's imports would cost each
worker seconds.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import os
import sys
import time
from pathlib import Path
from typing import Any


def _tuplify(v: Any) -> Any:
    return tuple(_tuplify(x) for x in v) if isinstance(v, list) else v


def compile_one(launch: dict[str, Any], key: str, arch: int, src_dir: Path) -> dict[str, Any]:
    """Import ``launch``'s source as a real ``JITFunction`` and compile it for
    ``sm_<arch>``: ``ptx``, ``ptxas`` (the report), ``shared`` and
    ``seconds``, or ``error`` and ``seconds``."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    start = time.perf_counter()
    log = io.StringIO()
    try:
        path = src_dir / f"{key}.py"
        if not path.exists():
            path.write_text(launch["source"])
        spec = importlib.util.spec_from_file_location(f"conveyor_aot_{key.replace('-', '_')}", path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        fn = getattr(module, launch["name"])
        src = ASTSource(
            fn,
            {k: _tuplify(v) for k, v in launch["signature"]},
            {tuple(k): _tuplify(v) for k, v in launch["constexprs"]},
            {tuple(k): [[a, _tuplify(b)] for a, b in v] for k, v in launch["attrs"]},
        )
        options = {k: _tuplify(v) for k, v in launch["options"]}
        with contextlib.redirect_stdout(log):  # ptxas's report is printed
            kernel = triton.compile(src, target=GPUTarget("cuda", arch, 32), options=options)
        return {
            "ptx": kernel.asm["ptx"],
            "ptxas": log.getvalue(),
            "shared": getattr(kernel.metadata, "shared", None),
            "seconds": time.perf_counter() - start,
        }
    except Exception as exc:  # noqa: BLE001 (the point is to report it)
        return {"error": f"{type(exc).__name__}: {exc}", "seconds": time.perf_counter() - start}


def main(base: Path) -> None:
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise SystemExit("the ahead-of-time worker needs TRITON_INTERPRET=0")
    jobs = json.loads((base / "jobs.json").read_text())
    src_dir = base / "src"
    src_dir.mkdir(exist_ok=True)
    with open(base / "results.jsonl", "a") as out:
        for job in jobs:
            r = compile_one(job["launch"], job["key"], job["arch"], src_dir)
            out.write(json.dumps({"id": job["id"], **r}) + "\n")
            out.flush()


if __name__ == "__main__":
    main(Path(sys.argv[1]))
