"""The catalogue of programs the functionalize stage must get right.

Each :class:`Case` is a function, how to build its inputs, and which inputs it
mutates. With ``requires_grad``, float inputs require grad; the inputs a case
mutates are then non-leaf tensors (``leaf * 1``), since writing into a leaf
that requires grad is an error in eager (see test_functionalize_errors.py).
"""

from __future__ import annotations

import catalogue_inputs  # noqa: F401  (registers its cases, in this order)
import catalogue_outputs  # noqa: F401
from catalogue_case import CASES, Case

__all__ = ["CASES", "Case"]
