"""Note [Outputs no loss reaches] (``undefined.py``): an input whose every
path leads to program outputs the loss does not use keeps ``.grad`` ``None``,
as in eager; before, the compiled backward gave it zeros."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from typing import Any

import conveyor
import pytest
import torch


class TwoHeads(torch.nn.Module):
    """A trunk and two heads; the loss below uses the first head only."""

    def __init__(self) -> None:
        super().__init__()
        self.trunk = torch.nn.Linear(4, 6)
        self.first = torch.nn.Linear(6, 3)
        self.second = torch.nn.Linear(6, 2)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = self.trunk(x).relu()
        return self.first(h), self.second(h)


ENTRIES: dict[str, Callable[[Any], Any]] = {
    "conveyor": conveyor.compile,
    "dynamo": lambda m: torch.compile(m, backend="conveyor"),
}


def _grads(m: torch.nn.Module) -> dict[str, torch.Tensor | None]:
    return {name: p.grad for name, p in m.named_parameters()}


@pytest.mark.parametrize("entry", ENTRIES)
def test_parameters_of_an_unused_head_keep_none(entry: str) -> None:
    torch.manual_seed(0)
    eager = TwoHeads()
    model = copy.deepcopy(eager)
    compiled = ENTRIES[entry](model)
    x = torch.randn(5, 4)
    eager(x)[0].square().sum().backward()
    compiled(x)[0].square().sum().backward()
    want, got = _grads(eager), _grads(model)
    assert [k for k, g in got.items() if g is None] == ["second.weight", "second.bias"]
    for name, g in want.items():
        if g is not None:
            torch.testing.assert_close(got[name], g)


@pytest.mark.parametrize("entry", ENTRIES)
def test_an_optimizer_leaves_the_unused_head_alone(entry: str) -> None:
    """AdamW with weight decay skips a parameter whose ``.grad`` is ``None``;
    with zeros it would shrink it."""
    torch.manual_seed(0)
    eager = TwoHeads()
    model = copy.deepcopy(eager)
    compiled = ENTRIES[entry](model)
    for m, fn in ((eager, eager), (model, compiled)):
        opt = torch.optim.AdamW(m.parameters(), lr=0.1, weight_decay=0.5)
        for step in range(2):
            x = torch.randn(5, 4, generator=torch.Generator().manual_seed(step))
            fn(x)[0].sum().backward()
            opt.step()
            opt.zero_grad()
    for (name, p), q in zip(eager.named_parameters(), model.parameters()):
        torch.testing.assert_close(q, p, msg=name)


@pytest.mark.parametrize("entry", ENTRIES)
def test_autograd_grad_of_an_unused_input(entry: str) -> None:
    def program(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return (a * 2).sum(), a * b

    fn = ENTRIES[entry](program)
    a, b = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    first, second = fn(a, b)
    ga, gb = torch.autograd.grad(first, (a, b), allow_unused=True, retain_graph=True)
    torch.testing.assert_close(ga, torch.full((3,), 2.0))
    assert gb is None
    with pytest.raises(RuntimeError, match="not have been used in the graph"):
        torch.autograd.grad(first, (b,), retain_graph=True)
    # both outputs reached: every gradient, as eager's
    ga, gb = torch.autograd.grad((first, second.sum()), (a, b))
    torch.testing.assert_close(ga, 2 + b.detach())
    torch.testing.assert_close(gb, a.detach())


class _NoneForSecond(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return x * y

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None]:
        return g * 3, None


def test_a_function_none_and_an_unreached_output_together() -> None:
    """``y`` reaches the loss only through a Function that returns ``None``
    for it, and the unused output directly: ``None``, as eager."""

    def program(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return _NoneForSecond.apply(x, y).sum(), y * 2

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fn = conveyor.compile(program)
        x, y = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
        fn(x, y)[0].backward()
    torch.testing.assert_close(x.grad, torch.full((3,), 3.0))
    assert y.grad is None


def test_symbolic_sizes_make_zeros_of_this_call_s_size() -> None:
    def program(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return (a.sin() * b).sum(), b.cos()

    fn = conveyor.compile(program, dynamic=True)
    for n in (3, 5, 7):
        a, b = torch.randn(n, requires_grad=True), torch.randn(n, requires_grad=True)
        first, second = fn(a, b)
        (second * 2).sum().backward()  # the unreached one this time is the first
        assert a.grad is None
        torch.testing.assert_close(b.grad, -2 * b.detach().sin())
