"""Compile timings and progress on long compiles.

Note [Compile timings]: a compile is a capture and then every stage run on
every request (Note [Stamps] in ``conveyor.protocol.stamps``). Each is timed:

- the capture, by whoever captures (``conveyor.compile``, the dynamo
  backend), handed to :func:`compiling` as a :class:`Captured`;
- each stage run on one request, by the pipeline driver (``Pipeline._run``),
  through :func:`stage_run`. The seconds go into the run's stamps
  (``StageGraph.seconds``) and into this compile's list of runs.

:func:`compiling` brackets one compile: the outermost opens it (the capturer,
or ``Pipeline.compile`` when called directly), nested ones join it, so a
program compiled as two pipeline runs (a tensor-subclass training program's
forward and backward) is still one compile. When it ends without an error it
logs one INFO line on the ``conveyor`` logger, each stage's seconds summed
over its runs::

    compiled Net (forward, backward) in 1.42 s: capture 0.31, functionalize 0.12, autograd 0.40, eager 0.59

A stage may time steps of its own run with :func:`step` (the triton backend's
decompose, fuse and codegen); the line then gives their sums after the
stage's, ``triton 0.59 (decompose 0.21, fuse 0.20, codegen 0.12)``.

Progress: a compile still running :data:`PROGRESS_AFTER_S` seconds after its
capture began says on stderr which stage it starts, once per stage run, and
how long it took once done; a faster compile prints nothing. Config key
``progress`` (``CONVEYOR_PROGRESS=0``) turns that off. The summary is the
logger's, and stays whatever ``progress`` says.
"""

from __future__ import annotations

import contextlib
import logging
import sys
import time
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass, field

from conveyor.protocol import structured_trace
from conveyor.protocol.config import Config

__all__ = [
    "PROGRESS_AFTER_S",
    "Captured",
    "StageTime",
    "capture_seconds",
    "compiling",
    "stage_run",
    "step",
    "stopwatch",
    "summary",
]

log = logging.getLogger("conveyor")

#: seconds into a compile after which each stage run is announced on stderr
PROGRESS_AFTER_S = 2.0


@dataclass(frozen=True)
class Captured:
    """When a capture began (``time.perf_counter()``) and how long it took."""

    started: float
    seconds: float

    def __post_init__(self) -> None:
        if self.seconds < 0:
            raise ValueError(f"a capture cannot take {self.seconds} s")


@dataclass(frozen=True)
class StageTime:
    """One stage run on one request, and its seconds; with ``step``, one
    timed step inside such a run (:func:`step`)."""

    stage: str
    label: str
    seconds: float
    step: str = ""


@dataclass
class _Compile:
    """One compile in flight (the state :func:`compiling` keeps)."""

    name: str
    progress: bool
    started: float
    capture: float | None
    runs: list[StageTime] = field(default_factory=list)
    announced: bool = False
    capture_taken: bool = False


_current: ContextVar[_Compile | None] = ContextVar("conveyor_compile", default=None)


def stopwatch() -> float:
    """The clock every timing here reads."""
    return time.perf_counter()


@contextlib.contextmanager
def compiling(name: str, config: Config, captured: Captured | None = None) -> Iterator[None]:
    """Bracket one compile of the program ``name`` (Note [Compile timings]);
    inside another, join it."""
    if _current.get() is not None:
        yield
        return
    started = captured.started if captured is not None else stopwatch()
    run = _Compile(name, config.progress, started, captured.seconds if captured is not None else None)
    token = _current.set(run)
    try:
        yield
    finally:
        _current.reset(token)
    _finish(run)  # not reached when the compile raised


def capture_seconds() -> float | None:
    """The capture's seconds for the first captured graph of this compile to
    carry; ``None`` after that, or when the capture was not timed."""
    run = _current.get()
    if run is None or run.capture_taken:
        return None
    run.capture_taken = True
    return run.capture


@contextlib.contextmanager
def stage_run(stage: str, label: str) -> Iterator[list[float]]:
    """Time one stage run on one request: announce it when the compile is
    slow; once it ends, the yielded list holds its seconds."""
    run = _current.get()
    if run is not None:
        _announce(run, stage, label)
    took: list[float] = []
    start = stopwatch()
    token = _stage.set((stage, label))
    try:
        yield took
    finally:
        _stage.reset(token)
    took.append(stopwatch() - start)
    if run is not None:
        run.runs.append(StageTime(stage, label, took[0]))


#: the stage run in progress (stage, label), for :func:`step`
_stage: ContextVar[tuple[str, str] | None] = ContextVar("conveyor_stage", default=None)


@contextlib.contextmanager
def step(name: str) -> Iterator[None]:
    """Time a step of the running stage (Note [Compile timings]); the
    seconds of steps with the same name add up. Outside a timed compile it
    only runs the block."""
    run, stage = _current.get(), _stage.get()
    start = stopwatch()
    try:
        yield
    finally:
        if run is not None and stage is not None:
            run.runs.append(StageTime(stage[0], stage[1], stopwatch() - start, name))


def _announce(run: _Compile, stage: str, label: str) -> None:
    if run.progress and stopwatch() - run.started >= PROGRESS_AFTER_S:
        run.announced = True
        print(f"conveyor: compiling {run.name}: {stage} ({label}) ...", file=sys.stderr, flush=True)


def _finish(run: _Compile) -> None:
    total = stopwatch() - run.started
    if run.announced:
        print(f"conveyor: compiled {run.name} in {total:.1f} s", file=sys.stderr, flush=True)
    if log.isEnabledFor(logging.INFO):
        log.info("%s", summary(run.name, total, run.capture, tuple(run.runs)))
    # Note [Structured trace]: for tlparse (nothing built when tracing is off)
    structured_trace.emit_times(run.name, total, run.capture, run.runs, lambda: summary(run.name, total, run.capture, tuple(run.runs)))


def summary(name: str, total: float, capture: float | None, runs: tuple[StageTime, ...]) -> str:
    """The INFO line of one compile: each stage's seconds summed over its
    runs, in the order the stages first ran."""
    labels = list(dict.fromkeys(r.label for r in runs))
    per_stage: dict[str, float] = {}
    steps: dict[str, dict[str, float]] = {}
    for r in runs:
        if r.step:
            inside = steps.setdefault(r.stage, {})
            inside[r.step] = inside.get(r.step, 0.0) + r.seconds
        else:
            per_stage[r.stage] = per_stage.get(r.stage, 0.0) + r.seconds

    def part(stage: str, seconds: float) -> str:
        inside = ", ".join(f"{name} {s:.2f}" for name, s in steps.get(stage, {}).items())
        return f"{stage} {seconds:.2f}" + (f" ({inside})" if inside else "")

    parts = ([f"capture {capture:.2f}"] if capture is not None else []) + [
        part(stage, seconds) for stage, seconds in per_stage.items()
    ]
    if not per_stage:
        parts.append("no stage ran (loaded from the disk cache)")
    which = f" ({', '.join(labels)})" if labels else ""
    return f"compiled {name}{which} in {total:.2f} s: {', '.join(parts)}"
