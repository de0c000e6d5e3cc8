"""conveyor's graphs and compile times in torch's structured trace (tlparse).

Note [Structured trace]: ``TORCH_TRACE=<dir>`` makes torch write a
structured log of every compile, which ``tlparse`` turns into an HTML report:
dynamo's graph, AOTAutograd's joint, forward and backward graphs, guards,
metrics, per compile id (``[0/0]``). conveyor adds its own part through the
same channel (``torch._logging.trace_structured("artifact", ...)``):

- every stamp of a compile (Note [Stamps]), each an artifact named
  ``conveyor_<stage>_<label>`` (``conveyor_autograd_forward``), or
  ``conveyor_<stage>_<step>_<label>`` for a step inside a stage
  (``conveyor_autograd_joint_forward``), its payload ``str(StageGraph)``: a
  header with the stage's seconds, then the graph's code;
- the compile's times, ``conveyor_compile_times`` (JSON: the program's name,
  total, capture and per stage run seconds, and the INFO line of Note
  [Compile timings]).

Behind ``torch.compile`` they are filed under the compile id of the dynamo
graph conveyor compiles (lowering happens inside dynamo's compile; a
specialization compiled later, at run time, names the graph's compile id
explicitly), so they sit beside dynamo's own. ``conveyor.compile`` has no
compile id: tlparse lists its artifacts under ``[-/-]``.

Whether the installed torch has this channel is probed, never read from its
version: without ``torch._logging.trace_structured`` or its ``trace_log``
logger, nothing is emitted. When tracing is off (the trace logger has no
handler, torch's own test), :func:`emit_graphs` and :func:`emit_times` return
after one attribute read: no name or payload is built.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import json
import re
from collections.abc import Callable, Iterator, Sequence
from contextvars import ContextVar
from typing import Any

from conveyor.protocol.stamps import StageGraph

__all__ = ["artifact_name", "compile_id", "emit_graphs", "emit_times", "probe"]

_compile_id: ContextVar[Any] = ContextVar("conveyor_trace_compile_id", default=None)


@functools.cache
def probe() -> tuple[Callable[..., None], Any, frozenset[str]] | None:
    """``(trace_structured, trace_log, the keyword arguments it takes)`` of
    the installed torch, or ``None`` when it has no structured trace."""
    try:
        import torch._logging
        import torch._logging._internal as internal
    except ImportError:
        return None
    emit = getattr(torch._logging, "trace_structured", None)
    trace_log = getattr(internal, "trace_log", None)
    if not callable(emit) or not hasattr(trace_log, "handlers"):
        return None
    try:
        params = frozenset(inspect.signature(emit).parameters)
    except (TypeError, ValueError):
        return None
    if not {"metadata_fn", "payload_fn"} <= params:
        return None
    return emit, trace_log, params


def _sink() -> tuple[Callable[..., None], frozenset[str]] | None:
    found = probe()
    if found is None or not found[1].handlers:
        return None
    return found[0], found[2]


@contextlib.contextmanager
def compile_id(cid: Any) -> Iterator[None]:
    """File what is emitted inside under dynamo's compile id ``cid`` (a
    ``torch._guards.CompileId``; ``None``: whatever the context says)."""
    token = _compile_id.set(cid)
    try:
        yield
    finally:
        _compile_id.reset(token)


def artifact_name(graph: StageGraph) -> str:
    """``conveyor_<stage>_<label>``, or ``conveyor_<stage>_<step>_<label>``."""
    parts = ("conveyor", graph.stage, graph.step, graph.label) if graph.step else ("conveyor", graph.stage, graph.label)
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", "_".join(parts))


def _artifact(sink: tuple[Callable[..., None], frozenset[str]], name: str, encoding: str, payload: Callable[[], Any]) -> None:
    emit, params = sink
    extra: dict[str, Any] = {}
    cid = _compile_id.get()
    if cid is not None and "compile_id" in params:
        extra["compile_id"] = cid
    if "expect_trace_id" in params:
        extra["expect_trace_id"] = False  # conveyor.compile has no dynamo frame: no stack recorded
    emit(
        "artifact",
        metadata_fn=lambda: {"name": name, "encoding": encoding},
        payload_fn=payload,
        **extra,
    )


def emit_graphs(graphs: Sequence[StageGraph]) -> None:
    """Each stamp of one compile as an artifact (Note [Structured trace])."""
    sink = _sink()
    if sink is None:
        return
    for g in graphs:
        _artifact(sink, artifact_name(g), "string", functools.partial(str, g))


def emit_times(
    name: str, total: float, capture: float | None, runs: Sequence[Any], summary: Callable[[], str]
) -> None:
    """One compile's times as the ``conveyor_compile_times`` artifact
    (``runs``: ``timings.StageTime`` values; ``summary`` makes the INFO line)."""
    sink = _sink()
    if sink is None:
        return

    def payload() -> str:
        return json.dumps(
            {
                "program": name,
                "total_s": total,
                "capture_s": capture,
                "runs": [
                    {"stage": r.stage, "label": r.label, "seconds": r.seconds, **({"step": r.step} if r.step else {})}
                    for r in runs
                ],
                "summary": summary(),
            }
        )

    _artifact(sink, "conveyor_compile_times", "json", payload)
