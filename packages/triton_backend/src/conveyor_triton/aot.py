"""Compile generated kernels with the real Triton compiler, ahead of time.

Note [Ahead-of-time check]: without a GPU the backend's kernels run in
Triton's interpreter, which accepts code the GPU compiler refuses and says
nothing about the machine code. The check records each launch as Triton's
JIT would compile it (a :class:`Launch`: source, signature, constexprs,
attributes, options) through the launch watchers (Note [Launch watchers]),
then compiles every distinct one with ``triton.compile`` for CUDA targets
(sm_90, sm_80) in separate processes with ``TRITON_INTERPRET=0`` (the
interpreter choice is fixed at Triton's first import), and reads the PTX and
ptxas's report into :class:`PtxStats`. Its parts:

* :mod:`conveyor_triton.aot_record`: a launch as Triton's JIT specializes it
  (:func:`describe`, the :class:`Recorder` watcher, :func:`gpu_launch_config`);
* :mod:`conveyor_triton.aot_compile`: the pool of compiler processes
  (:func:`compile_launches`), each running :mod:`conveyor_triton.aot_worker`
  as a script that imports Triton alone, none of conveyor;
* :mod:`conveyor_triton.aot_ptx`: reading PTX and ptxas's report
  (:func:`ptx_stats`, :func:`summarize`).

It knows nothing of the code generator's argument convention: a launch is
the source text, the jit function's name, the positional arguments and the
launch keywords. This module gathers their public names:

    recorder = aot.Recorder()
    with metrics.watching_launches(recorder):
        compiled(x)
    results = aot.compile_launches(recorder.launches(), archs=(90, 80))
    assert not [r for r in results if r.error], aot.errors(results)

``python -m conveyor_triton.aot launches.json`` compiles launches saved with
:func:`save` and prints a table.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

from conveyor_triton.aot_compile import (
    ARCHS,
    PROBE,
    Result,
    cannot_compile,
    compile_launches,
    default_workers,
    errors,
    unavailable,
)
from conveyor_triton.aot_ptx import PtxStats, Summary, ptx_stats, summarize
from conveyor_triton.aot_record import Launch, Recorder, describe, gpu_launch_config, load, probe, save

__all__ = [
    "ARCHS",
    "PROBE",
    "Launch",
    "PtxStats",
    "Recorder",
    "Result",
    "Summary",
    "cannot_compile",
    "compile_launches",
    "default_workers",
    "describe",
    "errors",
    "gpu_launch_config",
    "load",
    "probe",
    "ptx_stats",
    "save",
    "summarize",
    "unavailable",
]


def _main(argv: Sequence[str]) -> int:
    import argparse

    p = argparse.ArgumentParser(prog="python -m conveyor_triton.aot", description=__doc__.split("\n\n")[0])
    p.add_argument("launches", help="a JSON file written by conveyor_triton.aot.save")
    p.add_argument("--arch", type=int, action="append", help="compute capability (repeatable; default 90 and 80)")
    p.add_argument("--workers", type=int, default=None)
    a = p.parse_args(argv)
    results = compile_launches(load(a.launches), archs=tuple(a.arch or ARCHS), workers=a.workers)
    for r in results:
        s = r.stats
        detail = (
            f"ld v/s {s.loads_vector}/{s.loads_scalar} st v/s {s.stores_vector}/{s.stores_scalar} "
            f"div {s.int_divs} regs {s.registers} spill {s.spill_stores}/{s.spill_loads}"
            if s
            else f"ERROR {r.error}"
        )
        print(f"sm_{r.arch} {r.name}: {detail}")
    return 1 if any(r.error for r in results) else 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
