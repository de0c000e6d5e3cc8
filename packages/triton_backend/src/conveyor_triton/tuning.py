"""Tuned launches: a few launch configurations of a static kernel tried once
on the GPU, the fastest kept, and the choice kept on disk beside the kernel.

Note [Tuned launches]: :func:`conveyor_triton.launch.choose` picks one launch
per kernel from its shape (Note [Launch configuration]); the best one for a
given GPU is a measurement, as Inductor's autotuning finds. So on CUDA, at
its first launch, a static kernel tries a small set of candidate launches
(:func:`candidates`: the heuristic's own first, then halving and doubling
the block of rows, or trading rows for row chunks in a looping reduction, or
other warp counts), each timed with CUDA events over a few runs after one
that compiles it, and keeps the fastest. What may vary is what the kernel's
source leaves free: ``XBLOCK`` always (masks cover a partial block),
``RBLOCK`` only in a looping reduction (a persistent one holds the whole row
in one ``RBLOCK`` tile), ``num_warps`` always. Not tuned:

* a split reduction's two kernels (the chunk is written into the first
  kernel's source, and the second's tile follows it: Note [Split
  reductions]) and generic kernels (blocks chosen per launch);
* a kernel whose source uses atomics: running it again would add twice;
* a kernel over fewer than ``MIN_ELEMENTS`` elements: its launch costs more
  than any launch shape could save, and each candidate is one more Triton
  compile in the first call (Triton's own cache keeps them for later
  processes).

Every other static kernel stores each of its outputs whole and reads no
output, so running a candidate again only writes the same values again (a
looping reduction with another ``RBLOCK`` adds in another order, within the
tolerance of any reordering, as Note [Split reductions] says of its own);
the kernel then runs once more with the chosen launch, so the values a call
returns are the chosen launch's. A scatter's static kernel (Note [Scatters]
in ``conveyor_triton.scatters``) is tuned the same way when it only stores
(``scatter``, ``index_put`` without accumulate, the clearing kernel of a
``scatter_reduce`` without self): it reads no output, and running it again
stores the same values at the same elements (where indexes repeat, which of
them wins is already unspecified on CUDA, as in eager); one that adds is not.

The choice is written beside the kernel's source in the kernel cache
(``k_<hash>.tune.json``, one entry per GPU name and compute capability): a
static kernel's source fixes every size, so a later process with the same
kernel on the same GPU launches it without trying again. The stage option
``autotune`` (default on) turns it off; on CPU (Triton's interpreter)
nothing is tried: its timings say nothing of a GPU's.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
from conveyor.stage_api import may_read, write_atomic

from conveyor_triton.launch import Launch, next_pow2

#: at most this many elements in a tuned tile (rows times the row block); twice the heuristic's ``TILE``
MAX_TILE = 8192
#: the largest pointwise block tried
MAX_XBLOCK = 2048
#: timed runs per candidate (after one that compiles and warms it)
REPS = 10
#: kernels over fewer elements (rows times row length) keep the heuristic's launch
MIN_ELEMENTS = 1 << 16

#: the timer a test installs to tune in the interpreter (:func:`tuning_on_cpu`); None: CUDA only
_cpu_timer: list[Callable[[Launch, Callable[[], None]], float]] = []


def candidates(launch: Launch, xnumel: int, rnumel: int | None) -> tuple[Launch, ...]:
    """The launches tried for a static kernel launched as ``launch`` (the
    heuristic's, first), or just ``launch`` when it is not tuned (Note
    [Tuned launches])."""
    if launch.split > 1:
        return (launch,)
    rows = next_pow2(max(xnumel, 1))
    found: list[Launch] = [launch]

    def add(xblock: int, rblock: int | None, warps: int | None = None) -> None:
        if xblock < 1 or xblock > rows or (rblock is not None and xblock * rblock > MAX_TILE):
            return
        if rblock is None and xblock > MAX_XBLOCK:
            return
        if warps is None:
            tile = xblock * (rblock or 1)
            warps = max(1, min(tile // 256, 8)) if rblock is None else max(2, min(tile // 128, 8))
        grid = (xnumel + xblock - 1) // xblock
        option = dataclasses.replace(launch, xblock=xblock, rblock=rblock, num_warps=next_pow2(warps), grid=grid)
        if option not in found:
            found.append(option)

    x, r = launch.xblock, launch.rblock
    if r is None:  # pointwise
        add(x // 2, None)
        add(x * 2, None)
    elif launch.persistent:  # RBLOCK is the whole row
        add(x, r, launch.num_warps * 2)
        add(x // 2, r)
        add(x * 2, r)
    else:  # a looping reduction: rows traded for row chunks
        add(x, r, launch.num_warps * 2)
        add(x * 2, r // 2)
        if r < next_pow2(max(rnumel or 1, 1)):
            add(max(x // 2, 1), r * 2)
    return tuple(found)


def tunable(source: str, launch: Launch, numel: int) -> bool:
    """Whether a static kernel with ``source`` over ``numel`` elements is
    tried with other launches (Note [Tuned launches])."""
    return launch.split == 1 and numel >= MIN_ELEMENTS and "tl.atomic" not in source


def wanted(device: torch.device) -> bool:
    """Whether launches on ``device`` are tuned: CUDA's (or any, under
    :func:`tuning_on_cpu`)."""
    return device.type == "cuda" or bool(_cpu_timer)


def device_key(device: torch.device) -> str:
    """The GPU a choice was measured on: its name and compute capability."""
    if device.type != "cuda":
        return device.type
    major, minor = torch.cuda.get_device_capability(device)
    return f"{torch.cuda.get_device_name(device)} sm_{major}{minor}"


def tune(
    run: Callable[[Launch], None],
    options: Sequence[Launch],
    device: torch.device,
    kernel_file: Path | None,
) -> Launch:
    """The fastest of ``options`` (``run(launch)`` launches the kernel with
    it), read from the record beside ``kernel_file`` when one was measured on
    this device before, else measured and recorded (Note [Tuned launches])."""
    if len(options) == 1:
        return options[0]
    key = device_key(device)
    record = _read(kernel_file)
    known = record.get(key)
    if known is not None:
        for option in options:
            if _params(option) == known:
                return option
    timer = _cpu_timer[-1] if _cpu_timer else _time_cuda
    best = min(options, key=lambda option: timer(option, lambda: run(option)))
    if kernel_file is not None:
        record[key] = _params(best)
        _write(kernel_file, record)
    return best


def _params(launch: Launch) -> dict[str, int | None]:
    return {"xblock": launch.xblock, "rblock": launch.rblock, "num_warps": launch.num_warps}


def _time_cuda(launch: Launch, run: Callable[[], None]) -> float:
    """Milliseconds per run of ``run``, by CUDA events, after one run that
    compiles and warms it."""
    run()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(REPS):
        run()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / REPS


def record_path(kernel_file: Path) -> Path:
    """Where the tuned choices for the kernel in ``kernel_file`` are kept."""
    return kernel_file.with_suffix(".tune.json")


def _read(kernel_file: Path | None) -> dict[str, Any]:
    if kernel_file is None:
        return {}
    path = record_path(kernel_file)
    if not path.exists() or not may_read(kernel_file.parent.parent, path, "triton tuning record"):
        return {}
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):  # torn or corrupt: measured again, written again
        return {}
    return record if isinstance(record, dict) else {}


def _write(kernel_file: Path, record: dict[str, Any]) -> None:
    try:
        write_atomic(record_path(kernel_file), json.dumps(record, sort_keys=True).encode("utf-8"))
    except OSError:  # a read-only cache: the choice is kept for this process only
        pass


@contextmanager
def tuning_on_cpu(timer: Callable[[Launch, Callable[[], None]], float]) -> Iterator[None]:
    """Tune launches on CPU too, timed by ``timer(launch, run)`` (tests: the
    interpreter's timings mean nothing, so a test says which is fastest)."""
    _cpu_timer.append(timer)
    try:
        yield
    finally:
        _cpu_timer.pop()
