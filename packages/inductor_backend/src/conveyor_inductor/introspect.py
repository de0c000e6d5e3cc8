"""See what Inductor generated: the backend's stamps carry it
(Note [Stamps] in ``conveyor.protocol.stamps``)."""

from __future__ import annotations

from typing import Any

import conveyor

from conveyor_inductor.probe import STAGE
from conveyor_inductor.program import InductorProgram


def programs(compiled: Any) -> tuple[InductorProgram, ...]:
    """The Inductor programs of the last call of ``compiled`` (one per graph:
    forward, backward, ...), each with Inductor's generated code."""
    return tuple(
        g.artifact
        for g in conveyor.last_graphs(compiled)
        if g.stage == STAGE and not g.step and isinstance(g.artifact, InductorProgram)
    )
