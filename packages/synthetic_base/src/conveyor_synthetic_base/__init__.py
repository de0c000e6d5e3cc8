"""conveyor-synthetic-base: inputs that overlap and are mutated become one
synthetic base; merged inputs are regenerated from it inside the program.

The names below are imported on first use (PEP 562): registering the stage
imports only what its ``cache_key`` needs (Note [Stage implementations
imported when they run] in ``conveyor.protocol.lazy``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from conveyor.stage_api import lazy_names

from conveyor_synthetic_base.__about__ import __version__

if TYPE_CHECKING:
    from conveyor.stage_api import Layout, overlaps

    from conveyor_synthetic_base.mapping import AliasView, BaseMap, InnerIdx, OuterIdx, SyntheticBase
    from conveyor_synthetic_base.plan import Mutations, PlanError, plan
    from conveyor_synthetic_base.stage import SyntheticBaseStage

_WHERE = {
    "Layout": "conveyor.stage_api",
    "overlaps": "conveyor.stage_api",
    "AliasView": "conveyor_synthetic_base.mapping",
    "BaseMap": "conveyor_synthetic_base.mapping",
    "InnerIdx": "conveyor_synthetic_base.mapping",
    "OuterIdx": "conveyor_synthetic_base.mapping",
    "SyntheticBase": "conveyor_synthetic_base.mapping",
    "Mutations": "conveyor_synthetic_base.plan",
    "PlanError": "conveyor_synthetic_base.plan",
    "plan": "conveyor_synthetic_base.plan",
    "SyntheticBaseStage": "conveyor_synthetic_base.stage",
}

__getattr__, __dir__ = lazy_names(globals(), _WHERE)

__all__ = [
    "AliasView",
    "BaseMap",
    "InnerIdx",
    "Layout",
    "Mutations",
    "OuterIdx",
    "PlanError",
    "SyntheticBase",
    "SyntheticBaseStage",
    "__version__",
    "overlaps",
    "plan",
]
