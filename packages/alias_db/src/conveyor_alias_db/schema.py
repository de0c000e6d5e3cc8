"""What an op's schema says about aliasing: the core's facts (``conveyor.schema``).

alias_db analyses the graph as written, so it counts the writes a schema does not
declare (``UNDECLARED_WRITES``: ``native_batch_norm``'s running statistics) and
treats the ``STORAGE_SWAPPING_OPS`` as unknown calls.
"""

from __future__ import annotations

import torch
from conveyor.schema import (
    STORAGE_SWAPPING_OPS,
    UNDECLARED_WRITES,
    ArgAlias,
    OpAliasing,
    ReturnAlias,
    op_aliasing,
    op_facts,
)

__all__ = [
    "STORAGE_SWAPPING_OPS",
    "UNDECLARED_WRITES",
    "ArgAlias",
    "OpAliasing",
    "ReturnAlias",
    "is_storage_swapping",
    "op_aliasing",
]


def is_storage_swapping(op: torch._ops.OpOverload) -> bool:
    """Whether ``op`` may make its arguments share storage in a way its schema does not declare."""
    return op_facts(op).storage_swap
