"""The arguments of one application of a custom autograd Function (Note
[Custom autograd functions] in ``conveyor.frontend.functions``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

Grads = list[torch.Tensor | None]


@dataclass(frozen=True)
class Arguments:
    """The arguments of one application with its tensors (at
    ``tensor_positions``) and symbolic ints (at ``int_positions``) left out
    (``None``): what the node passes at run time and what it holds."""

    template: tuple[Any, ...]
    tensor_positions: tuple[int, ...]
    int_positions: tuple[int, ...]

    @staticmethod
    def of(args: Sequence[Any]) -> Arguments:
        tensors = tuple(i for i, a in enumerate(args) if isinstance(a, torch.Tensor))
        ints = tuple(i for i, a in enumerate(args) if isinstance(a, torch.SymInt))
        template = tuple(None if i in tensors or i in ints else a for i, a in enumerate(args))
        return Arguments(template, tensors, ints)

    def tensors(self, args: Sequence[Any]) -> list[torch.Tensor]:
        return [args[i] for i in self.tensor_positions]

    def ints(self, args: Sequence[Any]) -> list[Any]:
        return [args[i] for i in self.int_positions]

    def fill(self, tensors: Sequence[torch.Tensor], ints: Sequence[Any]) -> list[Any]:
        args = list(self.template)
        for pos, t in zip(self.tensor_positions, tensors, strict=True):
            args[pos] = t
        for pos, n in zip(self.int_positions, ints, strict=True):
            args[pos] = n
        return args
