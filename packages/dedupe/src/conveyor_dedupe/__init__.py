"""conveyor-dedupe: the same tensor passed in several positions becomes one graph input.

The names below are imported on first use (PEP 562): registering the stage
imports none of them (Note [Stage implementations imported when they run]
in ``conveyor.protocol.lazy``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from conveyor.stage_api import lazy_names

from conveyor_dedupe.__about__ import __version__

if TYPE_CHECKING:
    from conveyor_dedupe.mapping import DedupeMap, InnerIdx, OuterIdx, first_positions
    from conveyor_dedupe.stage import Dedupe

_WHERE = {
    "DedupeMap": "conveyor_dedupe.mapping",
    "InnerIdx": "conveyor_dedupe.mapping",
    "OuterIdx": "conveyor_dedupe.mapping",
    "first_positions": "conveyor_dedupe.mapping",
    "Dedupe": "conveyor_dedupe.stage",
}

__getattr__, __dir__ = lazy_names(globals(), _WHERE)

__all__ = ["Dedupe", "DedupeMap", "InnerIdx", "OuterIdx", "__version__", "first_positions"]
