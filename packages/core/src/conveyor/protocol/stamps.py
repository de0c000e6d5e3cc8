"""Stamps: the graph after each stage, and after each step inside one.

Note [Stamps]: every graph a compile produces is recorded with the stage
that produced it, so a user can follow a program's whole journey
(:func:`conveyor.last_graphs`, ``CONVEYOR_LOG_GRAPHS``). The pipeline driver
stamps what it sees: the captured graph, and each request a wrapper stage
hands the next stage. What happens inside a stage the driver cannot see, so
the stage stamps it itself with :func:`stamp` while the driver runs it:

- a sub-pass graph (autograd's joint graph before partitioning, the triton
  backend's kernel graph) with a ``step`` name;
- a backend's own entry: the graph it lowered, after its own rewrites
  (``step=""``). A backend that stamps none is stamped with the graph it
  received.

A stamp may carry an ``artifact``: what the stage built from the graph (the
triton backend's program), handed to introspection explicitly rather than
hidden in ``graph.meta``. Outside a driver run (a stage's helper called by a
test, a backend compiling lazily at run time) :func:`stamp` does nothing.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import torch.fx

log = logging.getLogger("conveyor.graphs")

#: the environment switch that shows every stamp on stderr
LOG_SWITCH = "CONVEYOR_LOG_GRAPHS"


@dataclass(frozen=True)
class StageGraph:
    """A graph one stage produced, stamped with the stage and the program.

    :ivar stage: the stage that produced it (``"capture"`` for the captured graph).
    :ivar label: which program it belongs to (``"forward"``, ``"backward"``, ...).
    :ivar graph: the graph.
    :ivar step: ``""`` for what the stage hands on (a wrapper's request, a
        backend's lowered graph); else the name of a step inside the stage
        (``"joint"``, ``"kernels"``).
    :ivar artifact: what the stage built from the graph, for introspection
        (a backend's compiled program), or ``None``.
    :ivar seconds: how long the stage run that produced it took (for
        ``"capture"``, the capture; Note [Compile timings] in
        ``conveyor.protocol.timings``); ``None`` for a step inside a stage
        and where it was not timed.
    """

    stage: str
    label: str
    graph: torch.fx.GraphModule
    step: str = ""
    artifact: Any = None
    seconds: float | None = None

    def __str__(self) -> str:
        where = f"{self.stage}: {self.step}" if self.step else self.stage
        took = f" in {self.seconds:.2f} s" if self.seconds is not None else ""
        return f"# after {where} ({self.label}){took}\n{self.graph.code.strip()}\n"


@dataclass
class _StageRun:
    """The stamps of one stage run on one request (the driver's collector)."""

    stage: str
    label: str
    stamps: list[StageGraph]


_current: ContextVar[_StageRun | None] = ContextVar("conveyor_stage_run", default=None)


def stamp(graph: torch.fx.GraphModule, step: str = "", *, artifact: Any = None) -> None:
    """Stamp a graph the running stage produced (Note [Stamps]).

    Called by a stage while the pipeline driver runs it; does nothing outside
    a driver run.

    :param graph: the graph.
    :param step: the step inside the stage that produced it (``"joint"``);
        ``""`` for a backend's own entry: the graph it lowered.
    :param artifact: what the stage built from it (a compiled program), for
        introspection helpers to find.
    """
    run = _current.get()
    if run is not None:
        run.stamps.append(StageGraph(run.stage, run.label, graph, step, artifact))


@contextlib.contextmanager
def collecting(stage: str, label: str) -> Iterator[list[StageGraph]]:
    """The driver's side: collect the stamps of one stage run on one request."""
    run = _StageRun(stage, label, [])
    token = _current.set(run)
    try:
        yield run.stamps
    finally:
        _current.reset(token)


class _CurrentStderr(logging.StreamHandler):  # type: ignore[type-arg]
    """A handler writing to whatever ``sys.stderr`` is when a record comes
    (a test's captured stderr, a notebook's)."""

    def __init__(self) -> None:
        super().__init__()

    @property  # type: ignore[override]
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        pass


_switch_handler: list[logging.Handler] = []


def log_graphs(graphs: tuple[StageGraph, ...]) -> None:
    """Log every stamp of one compile on the ``conveyor.graphs`` logger, at
    INFO. While ``CONVEYOR_LOG_GRAPHS=1`` is set, a compile turns that logger
    on with a handler to stderr (and off again once the switch is unset);
    without it, configure the logger as any other
    (``logging.getLogger("conveyor.graphs")``)."""
    on = os.environ.get(LOG_SWITCH, "0").lower() not in ("", "0", "false", "off", "no")
    if on and not _switch_handler:
        handler = _CurrentStderr()
        handler.setFormatter(logging.Formatter("%(message)s"))
        log.addHandler(handler)
        log.setLevel(logging.INFO)
        _switch_handler.append(handler)
    elif not on and _switch_handler:
        log.removeHandler(_switch_handler.pop())
        log.setLevel(logging.NOTSET)
    if log.isEnabledFor(logging.INFO):
        for g in graphs:
            log.info("%s", g)
