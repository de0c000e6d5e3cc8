"""Note [Below autograd]: a segment on the fast path runs below torch's
autograd kernels only where nothing could tell, with the same values."""

from __future__ import annotations

from typing import Any

import conveyor_compiled_autograd as cca
import pytest
import torch
from ca_helpers import assert_same_grads
from conveyor_compiled_autograd import program as program_module
from conveyor_compiled_autograd.below import GUARD
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

pytestmark = pytest.mark.skipif(GUARD is None, reason="torch has no _AutoDispatchBelowADInplaceOrView")


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.LayerNorm(16), nn.Linear(16, 4))


def _steps(model: nn.Module, steps: int, mode: Any = None) -> tuple[list[torch.Tensor], list[Any]]:
    """Gradients of the last of ``steps`` backwards (in ``mode``, if given), and the segments' programs."""
    x = torch.randn(6, 8, generator=torch.Generator().manual_seed(1)).view(3, 2, 8)
    with cca.enable() as session:
        for step in range(steps):
            for p in model.parameters():
                p.grad = None
            loss = model(x).sum()
            if mode is not None and step == steps - 1:
                with mode:
                    loss.backward()
            else:
                loss.backward()
    assert session.last is not None
    return [p.grad for p in model.parameters()], list(session.last.backward.programs.values())


def test_a_functional_segment_runs_below_autograd_with_the_same_gradients(monkeypatch: pytest.MonkeyPatch) -> None:
    below, programs = _steps(_model(), 4)
    assert programs and all(p._last is not None and p._last.below for p in programs)
    monkeypatch.setattr(program_module, "unobserved", lambda: False)
    ordinary, _ = _steps(_model(), 4)
    for a, b in zip(below, ordinary, strict=True):
        assert a.stride() == b.stride() and torch.equal(a, b)
    eager = _model()
    eager(torch.randn(6, 8, generator=torch.Generator().manual_seed(1)).view(3, 2, 8)).sum().backward()
    compiled = _model()
    _steps(compiled, 4)
    assert_same_grads(eager.parameters(), compiled.parameters())


class _Calls(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.seen: list[Any] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        self.seen.append(func)
        return func(*args, **(kwargs or {}))


def test_a_dispatch_mode_sees_the_ordinary_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    """Below autograd, a composite op (``linear``) would reach a mode as itself."""
    seen = _Calls()
    _steps(_model(), 4, seen)
    monkeypatch.setattr(program_module, "unobserved", lambda: False)
    ordinary = _Calls()
    _steps(_model(), 4, ordinary)
    assert seen.seen == ordinary.seen and seen.seen


def test_an_output_that_aliases_an_input_keeps_autograd_s_records() -> None:
    """``sum``'s gradient is an ``expand`` of the incoming gradient: a view of an input."""
    torch.manual_seed(0)
    w = nn.Parameter(torch.randn(3, 4))
    v = nn.Parameter(torch.randn(3, 4))
    with cca.enable() as session:
        for _ in range(3):
            w.grad = v.grad = None
            (w.sum() + (v * 2).sum()).backward()
    assert session.last is not None
    programs = list(session.last.backward.programs.values())
    assert programs and all(p._last is not None and p._last.below is False for p in programs)
    assert torch.equal(w.grad, torch.ones(3, 4)) and torch.equal(v.grad, torch.full((3, 4), 2.0))


def test_only_the_kernels_would_see_the_calls() -> None:
    from conveyor_compiled_autograd.below import unobserved

    assert not unobserved()  # grad mode on
    with torch.no_grad():
        assert unobserved()
        with _Calls():
            assert not unobserved()
        x, w = torch.randn(2, 3), torch.randn(4, 3)
        ordinary, below = _Calls(), _Calls()
        with ordinary:
            torch.nn.functional.linear(x, w)
        with GUARD(), below:
            torch.nn.functional.linear(x, w)
        assert torch.ops.aten.linear.default not in ordinary.seen  # the mode sees linear's parts ...
        assert below.seen == [torch.ops.aten.linear.default]  # ... but below autograd, linear itself
