"""OpInfo samples as plain calls, for sweeps of ops through a pipeline.

An OpInfo ``SampleInput`` holds its tensors inside ``input``, ``args`` and
``kwargs``; a compiled function takes tensors as positional arguments. This
turns one sample into ``fn(*tensors)`` plus the sample's tensors, so a sweep
can hand both to the compiler and to the checker.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
import torch.utils._pytree as pytree


def sample_call(op: Callable[..., Any], sample: Any) -> tuple[Callable[..., Any], list[torch.Tensor]]:
    """``(fn, tensors)``: ``fn(*tensors)`` calls ``op`` on ``sample``'s input,
    args and kwargs with its tensors (every tensor leaf, in pytree order)
    replaced by the arguments; non-tensor leaves are kept as constants."""
    leaves, spec = pytree.tree_flatten((sample.input, sample.args, sample.kwargs))
    positions = [k for k, v in enumerate(leaves) if isinstance(v, torch.Tensor)]

    def fn(*tensors: Any) -> Any:
        filled = list(leaves)
        for k, t in zip(positions, tensors, strict=True):
            filled[k] = t
        inp, args, kwargs = pytree.tree_unflatten(filled, spec)
        return op(inp, *args, **kwargs)

    return fn, [leaves[k] for k in positions]
