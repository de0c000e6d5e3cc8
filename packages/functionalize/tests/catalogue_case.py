"""The :class:`Case` record and the registry the functionalize catalogue's
program modules add to (see ``functionalize_catalogue.py``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Case:
    name: str
    fn: Callable[..., Any]
    shapes: tuple[tuple[int, ...], ...]
    mutated: tuple[int, ...] = ()
    grad_variant: bool = True  # also run with requires_grad (not for set_: eager has no backward)

    def leaves(self, requires_grad: bool) -> list[torch.Tensor]:
        gen = torch.Generator().manual_seed(len(self.name))
        return [torch.randn(s, generator=gen).requires_grad_(requires_grad) for s in self.shapes]

    def inputs(self, leaves: list[torch.Tensor]) -> list[torch.Tensor]:
        return [t * 1 if i in self.mutated and t.requires_grad else t for i, t in enumerate(leaves)]


CASES: list[Case] = []


def case(
    *shapes: tuple[int, ...], mutated: tuple[int, ...] = (), grad_variant: bool = True
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        CASES.append(Case(fn.__name__, fn, shapes, mutated, grad_variant))
        return fn

    return register


S = (3, 4)
