"""See the kernels: the same introspection as the stage graphs.

``conveyor.last_graphs(compiled)`` lists the graph after each stage; the
triton backend's own stamp (the graph it lowered) carries the program it
built as the stamp's ``artifact`` (Note [Stamps] in ``conveyor.protocol.stamps``).
These helpers collect them.
"""

from __future__ import annotations

from typing import Any

import conveyor

from conveyor_triton.backend import STAGE
from conveyor_triton.program import Program
from conveyor_triton.report import Report
from conveyor_triton.specialize import PerSizes


def programs(compiled: Any) -> tuple[Program, ...]:
    """The triton programs of the last call of ``compiled`` (one per graph:
    forward, backward, ...). For a symbolically sized graph, the program of
    the sizes it last ran with (none before it ran)."""
    found: list[Program] = []
    for g in conveyor.last_graphs(compiled):
        if g.stage != STAGE or g.step:
            continue
        p = g.artifact.last if isinstance(g.artifact, PerSizes) else g.artifact
        if isinstance(p, Program) and p not in found:
            found.append(p)
    return tuple(found)


def reports(compiled: Any) -> tuple[Report, ...]:
    """The per-graph reports (``print`` one: kernels, fused nodes, aten
    fallbacks and why; ``.sources()``: the generated Triton source)."""
    return tuple(p.report for p in programs(compiled))
