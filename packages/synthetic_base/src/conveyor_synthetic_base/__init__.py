"""conveyor-synthetic-base: inputs that overlap and are mutated become one
synthetic base; merged inputs are regenerated from it inside the program."""

from conveyor.stage_api import Layout, overlaps

from conveyor_synthetic_base.__about__ import __version__
from conveyor_synthetic_base.mapping import AliasView, BaseMap, InnerIdx, OuterIdx, SyntheticBase
from conveyor_synthetic_base.plan import Mutations, PlanError, plan
from conveyor_synthetic_base.stage import SyntheticBaseStage

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
