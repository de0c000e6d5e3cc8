"""Note [Inputs that get no gradient]: a compiled program's node has no
autograd edge to an input that requires grad but gets no gradient, so the
engine never runs the node behind it (eager's graph has no path there)."""

from __future__ import annotations

import conveyor
import torch


class _CountingDouble(torch.autograd.Function):
    calls = 0

    @staticmethod
    def forward(ctx: object, x: torch.Tensor) -> torch.Tensor:
        return x * 2

    @staticmethod
    def backward(ctx: object, g: torch.Tensor) -> torch.Tensor:
        _CountingDouble.calls += 1
        return g * 2


def test_a_detached_input_has_no_edge_to_the_node_behind_it() -> None:
    def program(e: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return (e.detach() * b).sum()

    a, b = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    e = _CountingDouble.apply(a)  # eager: its backward is not reached by the program's loss
    out = conveyor.compile(program)(e, b)
    _CountingDouble.calls = 0
    out.backward()
    assert _CountingDouble.calls == 0 and a.grad is None
    torch.testing.assert_close(b.grad, e.detach())


def test_the_same_program_backwards_twice_through_a_compiled_producer() -> None:
    """Two compiled programs: the second detaches the first's output. The
    first's backward runs once (before: twice, the second time after its
    saved tensors were freed: a TypeError)."""
    first = conveyor.compile(lambda a: (a * a, (a * a).sum()))
    second = conveyor.compile(lambda e, b: (e.detach() * b).sum())
    a, b = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    e, loss = first(a)
    loss.backward()
    second(e, b).backward()
    torch.testing.assert_close(a.grad, 2 * a.detach())
    torch.testing.assert_close(b.grad, (a * a).detach())
