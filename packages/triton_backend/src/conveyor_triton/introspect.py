"""See the kernels: the same introspection as the stage graphs.

``conveyor.last_graphs(compiled)`` lists the graph after each stage; the
graphs the triton backend compiled carry their program in
``graph.meta["conveyor_triton"]``. These helpers collect them.
"""

from __future__ import annotations

from typing import Any

import conveyor

from conveyor_triton.program import Program
from conveyor_triton.report import Report


def programs(compiled: Any) -> tuple[Program, ...]:
    """The triton programs of the last call of ``compiled`` (one per graph:
    forward, backward, ...)."""
    found: list[Program] = []
    for g in conveyor.last_graphs(compiled):
        p = g.graph.meta.get("conveyor_triton")
        if g.stage == "triton" and isinstance(p, Program) and p not in found:
            found.append(p)
    return tuple(found)


def reports(compiled: Any) -> tuple[Report, ...]:
    """The per-graph reports (``print`` one: kernels, fused nodes, aten
    fallbacks and why; ``.sources()``: the generated Triton source)."""
    return tuple(p.report for p in programs(compiled))
