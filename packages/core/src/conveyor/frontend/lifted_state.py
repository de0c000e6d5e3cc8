"""A module's parameters and buffers as a program's lifted inputs: their
names and order, and the names ``functional_call`` swaps (one per slot)."""

from __future__ import annotations

from typing import Any

import torch

__all__ = ["lifted_state", "one_per_slot"]


def lifted_state(module: torch.nn.Module) -> tuple[list[str], list[torch.Tensor]]:
    """A module's parameters and buffers, in a stable order, lifted as inputs."""
    names: list[str] = []
    tensors: list[torch.Tensor] = []
    t: torch.Tensor
    for name, t in module.named_parameters(remove_duplicate=False):
        names.append(name)
        tensors.append(t)
    for name, t in module.named_buffers(remove_duplicate=False):
        names.append(name)
        tensors.append(t)
    return names, tensors


def one_per_slot(module: torch.nn.Module, params: dict[str, Any]) -> dict[str, Any]:
    """Note [A submodule reached by two paths]: ``lifted_state`` names a shared
    submodule's tensors once per path (``0.weight``, ``1.weight`` of
    ``Sequential(lin, lin)``), and ``functional_call`` given both swaps the one
    slot twice and puts back the first swap's fake on exit, a write the state
    watch then refuses. One name per (module, attribute) is swapped; the slot
    holds one tensor, so every path reads the same value."""
    seen: set[tuple[int, str]] = set()
    kept: dict[str, Any] = {}
    for name, value in params.items():
        prefix, _, leaf = name.rpartition(".")
        key = (id(module.get_submodule(prefix)), leaf)
        if key not in seen:
            seen.add(key)
            kept[name] = value
    return kept
