"""Note [Inputs freed early]: on the fast path a segment's inputs (the lifted
saved tensors) are freed at their last reader inside the segment, with the
same gradients."""

from __future__ import annotations

import weakref
from typing import Any

import conveyor_compiled_autograd as cca
import torch
from ca_helpers import assert_same_grads
from torch import nn


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 4))


def _x() -> torch.Tensor:
    return torch.randn(6, 8, generator=torch.Generator().manual_seed(1))


class _Watching:
    """Wraps a variant's list-taking call: which of the segment's tensor
    inputs are still alive when the call returns (nothing reads them then)."""

    def __init__(self, taking: Any) -> None:
        self.taking = taking
        self.alive: list[list[tuple[int, ...]]] = []
        self.tensors: list[int] = []

    def __call__(self, args: list[Any]) -> Any:
        refs = [(tuple(a.shape), weakref.ref(a)) for a in args if isinstance(a, torch.Tensor) and not isinstance(a, nn.Parameter)]
        outs = self.taking(args)
        self.tensors.append(len(refs))
        self.alive.append([shape for shape, r in refs if r() is not None])
        return outs


def _steps(model: nn.Module, steps: int, free: bool) -> tuple[list[torch.Tensor | None], _Watching | None]:
    x = _x()
    watch = None
    with cca.enable() as session:
        for step in range(steps):
            for p in model.parameters():
                p.grad = None
            loss = model(x).square().sum()
            if step == steps - 1:
                assert session.last is not None
                (program,) = session.last.backward.programs.values()
                variant = program._last.variant
                assert variant.taking is not None  # the eager backend offers it
                watch = _Watching(variant.taking) if free else None
                object.__setattr__(variant, "taking", watch)
            loss.backward()
    return [p.grad for p in model.parameters()], watch


def test_saved_activations_die_inside_the_segment_with_the_same_gradients() -> None:
    freed, watch = _steps(_model(), 4, free=True)
    assert watch is not None and len(watch.tensors) == 1 and watch.tensors[0] > 3
    # the saved activations (tanh outputs, the hidden linears' inputs, the output) are held by nothing
    # else; the input x is the test's, a 0-dim one torch's
    assert sorted(watch.alive[0]) == [(), (6, 8)], (watch.alive, watch.tensors)
    held, _ = _steps(_model(), 4, free=False)  # the held form (no list-taking call)
    for a, b in zip(freed, held, strict=True):
        assert a is not None and b is not None and a.stride() == b.stride() and torch.equal(a, b)
    eager = _model()
    eager(_x()).square().sum().backward()
    compiled = _model()
    _steps(compiled, 4, free=True)
    assert_same_grads(eager.parameters(), compiled.parameters())
