"""Compiled programs cut gradients where eager does, through every stage and
both entry points, on every supported torch (core Note [Gradient cuts below
autograd]; the capture-level checks are in ``packages/core/tests``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import conveyor
import pytest
import torch
from conveyor.testing import check

ENTRIES: dict[str, Callable[[Any], Any]] = {
    "conveyor": conveyor.compile,
    "dynamo": lambda f: torch.compile(f, backend="conveyor"),
}


def _cuts(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
    h = x @ w
    stopped = h.detach()
    return (h * stopped).sum(), stopped, (h.detach() + 1).tanh()


@pytest.mark.parametrize("entry", ENTRIES)
def test_compiled_programs_cut_gradients_where_eager_does(entry: str) -> None:
    compile = ENTRIES[entry]
    x, w = torch.randn(4, 3, requires_grad=True), torch.randn(3, 3, requires_grad=True)
    check(_cuts, x, w, compile=compile)
    outs = compile(_cuts)(x, w)
    assert [o.requires_grad for o in outs] == [True, False, False]


def _detached_first(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    a = (x + 1).transpose(0, 1)  # a view of an intermediate, returned after its detached alias
    return a.detach(), a


def _detached_among_views(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    a = x + 1
    return a.detach(), a.t(), a.view(-1)


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("fn", [_detached_first, _detached_among_views], ids=lambda f: f.__name__)
def test_a_detached_output_beside_its_source_keeps_each_autograd_state(entry: str, fn: Any) -> None:
    """The outputs share memory; the one that requires grad is computed, the
    detached one rebuilt from it (it was the other way round: the output
    that requires grad came back detached)."""
    x = torch.randn(2, 3, requires_grad=True)
    check(fn, x, compile=ENTRIES[entry])
    outs = ENTRIES[entry](fn)(x)
    assert [o.requires_grad for o in outs] == [o.requires_grad for o in fn(x)]
