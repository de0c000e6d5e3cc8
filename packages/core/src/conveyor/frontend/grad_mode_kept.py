"""A capture that ends in another grad mode than it began: put back, and refused."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from conveyor.errors import EagerFallback


# Note [A program that leaves grad mode changed]: ``torch.set_grad_enabled(False)``
# called (not entered) in a program changes the caller's grad mode for what
# follows the call, and outputs computed before it keep their history. A
# graph has no way to say so: its grad-mode switches are regions inside it
# (Note [Gradient cuts below autograd]). The trace ran the switch for real,
# so it would have left the capturing thread's mode changed once (the first
# call's outputs came back without history, later calls changed nothing), and
# behind dynamo the compiled graph left the mode as it found it (h_sweep5 B7).
# So a trace that ends in another grad mode than it began puts the mode back
# and the program runs eagerly, with a warning; behind dynamo, the graph
# runs as dynamo made it, which sets the mode.
@contextlib.contextmanager
def grad_mode_kept() -> Iterator[None]:
    before = torch.is_grad_enabled()
    try:
        yield
    finally:
        after = torch.is_grad_enabled()
        torch._C._set_grad_enabled(before)
    if after != before:
        raise EagerFallback(
            f"it leaves grad mode {'on' if after else 'off'} (torch.set_grad_enabled called, not entered), "
            "which a graph cannot replay (Note [A program that leaves grad mode changed])"
        )
