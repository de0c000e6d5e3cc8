"""conveyor-alias-db: alias and write analysis over FX graphs, updated in place
as nodes are merged into fusion groups (pytorch/pytorch PR 42141).

``AliasDb.from_graph(graph)`` builds it; see ``conveyor_alias_db.db`` for the
queries and updates and Note [Memory locations] in
``conveyor_alias_db.locations`` for the model.
"""

from conveyor_alias_db.__about__ import __version__
from conveyor_alias_db.db import AliasDb
from conveyor_alias_db.debug import ENV_VAR, AliasDbMismatch
from conveyor_alias_db.group import FusedGroup, group_of
from conveyor_alias_db.inputs import input_aliasing
from conveyor_alias_db.locations import RNG, WILDCARD, Effects, LocId, ValueFacts
from conveyor_alias_db.ordering import MemoryOrder, memory_order

__all__ = [
    "ENV_VAR",
    "RNG",
    "WILDCARD",
    "AliasDb",
    "AliasDbMismatch",
    "Effects",
    "FusedGroup",
    "LocId",
    "MemoryOrder",
    "ValueFacts",
    "__version__",
    "group_of",
    "input_aliasing",
    "memory_order",
]
