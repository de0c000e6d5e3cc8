"""Plain-data descriptions of a graph's static inputs (Note [Storing
Inductor programs] in ``program.py``), from which fake inputs are made again:
in a later process, or in a fake mode with a ``ShapeEnv`` (Note [Inductor's
FX graph cache] in ``fx_cache.py``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class TensorSpec:
    """A static tensor input, in plain data."""

    size: tuple[int, ...]
    stride: tuple[int, ...]
    storage_offset: int
    dtype: torch.dtype
    device: str
    requires_grad: bool

    def fake(self) -> torch.Tensor:
        """A tensor with this description, made under the active fake mode."""
        if self.storage_offset == 0:  # one op (a backward's hundred inputs: most of them)
            made = torch.empty_strided(self.size, self.stride, dtype=self.dtype, device=self.device)
            return made.requires_grad_() if self.requires_grad else made
        span = 1 + sum((n - 1) * s for n, s in zip(self.size, self.stride) if n > 0) if all(self.size) else 0
        base = torch.empty(self.storage_offset + span, dtype=self.dtype, device=self.device)
        made = base.as_strided(self.size, self.stride, self.storage_offset) if base.numel() else base.view(self.size)
        made = made.detach()
        return made.requires_grad_() if self.requires_grad else made


def describe_inputs(inputs: Sequence[Any]) -> tuple[TensorSpec | int | float | bool, ...] | None:
    """Plain-data descriptions of static inputs; ``None`` when any is symbolic
    (Note [Storing Inductor programs])."""
    described: list[TensorSpec | int | float | bool] = []
    for x in inputs:
        if isinstance(x, torch.Tensor):
            if x.layout is not torch.strided:
                return None
            dims = (*x.shape, *x.stride(), x.storage_offset())
            if any(not isinstance(d, int) for d in dims):
                return None
            described.append(
                TensorSpec(
                    tuple(x.shape), tuple(x.stride()), int(x.storage_offset()), x.dtype, str(x.device), x.requires_grad
                )
            )
        elif isinstance(x, bool | int | float) and not isinstance(x, torch.SymInt | torch.SymFloat | torch.SymBool):
            described.append(x)
        else:
            return None
    return tuple(described)
