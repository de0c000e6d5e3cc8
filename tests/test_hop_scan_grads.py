"""``torch._higher_order_ops.scan`` with gradients through ``conveyor.compile``
and ``torch.compile(backend="conveyor")``, against eager with
``conveyor.testing.check``. torch's scan autograd Function rewrites the
graphs it is given, and conveyor applies one application several times
(core Note [Graphs a Function rewrites]): the backward raised a TypeError
(one tangent too few) on both entries."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import conveyor
import pytest
import torch
from conveyor.testing import check

sys.path.insert(0, str(Path(__file__).parent))
from zoo_harness import fresh_dynamo  # noqa: E402,F401  (autouse)

scan = pytest.importorskip("torch._higher_order_ops.scan").scan

ENTRY_POINTS = {"conveyor": conveyor.compile, "dynamo": lambda fn: torch.compile(fn, backend="conveyor")}


def _step(carry: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    nc = carry * x + 1
    return nc + 0, nc.sin()


def simple(init: torch.Tensor, xs: torch.Tensor) -> Any:
    return scan(_step, init, xs)


def xs_as_intermediate(init: torch.Tensor, xs: torch.Tensor) -> Any:
    c, ys = scan(_step, init.cos(), xs * 2)
    return c.sum() + ys.sum()


def reverse(init: torch.Tensor, xs: torch.Tensor) -> Any:
    return scan(_step, init, xs, reverse=True)


def two_carries(a: torch.Tensor, b: torch.Tensor, xs: torch.Tensor) -> Any:
    def step(c: tuple[torch.Tensor, torch.Tensor], x: torch.Tensor) -> Any:
        p, q = c
        return (p + x * q, q * 0.5 + x), (p * q).tanh()

    return scan(step, (a, b), xs)


def closure_weight(init: torch.Tensor, xs: torch.Tensor, w: torch.Tensor) -> Any:
    def step(carry: torch.Tensor, x: torch.Tensor) -> Any:
        h = torch.tanh(carry @ w + x)
        return h, h * 2

    return scan(step, init, xs)


def carry_returned_as_is(init: torch.Tensor, xs: torch.Tensor) -> Any:
    def step(carry: torch.Tensor, x: torch.Tensor) -> Any:
        return carry + x, carry.clone()

    return scan(step, init, xs)


def _r(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, requires_grad=True)


PROGRAMS: dict[str, tuple[Callable[..., Any], Callable[[], tuple[torch.Tensor, ...]]]] = {
    "simple": (simple, lambda: (_r(3), _r(4, 3))),
    "xs_as_intermediate": (xs_as_intermediate, lambda: (_r(3), _r(5, 3))),
    "reverse": (reverse, lambda: (_r(2, 3), _r(4, 2, 3))),
    "two_carries": (two_carries, lambda: (_r(3), _r(3), _r(4, 3))),
    "closure_weight": (closure_weight, lambda: (_r(2, 4), _r(5, 2, 4), _r(4, 4))),
    "init_without_grad": (simple, lambda: (torch.randn(3), _r(4, 3))),
    "carry_returned_as_is": (carry_returned_as_is, lambda: (_r(3), _r(4, 3))),
}


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
@pytest.mark.parametrize("name", list(PROGRAMS))
def test_scan_gradients_as_in_eager(name: str, entry: str) -> None:
    fn, inputs = PROGRAMS[name]
    torch.manual_seed(0)
    compiled = ENTRY_POINTS[entry](fn)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="conveyor: compiling", category=UserWarning)
        for _ in range(2):  # the second call runs the compiled program again (a fresh application)
            check(fn, *inputs(), compile=lambda _: compiled, atol=1e-5, rtol=1e-5)


def test_scan_backward_twice_with_retain_graph() -> None:
    compiled = conveyor.compile(simple)
    init, xs = _r(3), _r(4, 3)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="conveyor: compiling", category=UserWarning)
        c, ys = compiled(init, xs)
    loss = c.sum() + ys.sum()
    loss.backward(retain_graph=True)
    first = init.grad.clone()
    loss.backward()
    torch.testing.assert_close(init.grad, 2 * first)


def test_a_function_that_leaves_its_graphs_alone_keeps_them() -> None:
    """Only an application that rewrote a graph gets fresh copies (Note
    [Graphs a Function rewrites]): ``cond``'s keeps the graphs it was given."""
    from conveyor.frontend.function_arguments import Arguments

    gm = torch.fx.symbolic_trace(torch.nn.Linear(2, 2))
    arguments = Arguments.of((torch.ones(2), gm, 3))
    snapshot = arguments.snapshot()
    assert set(snapshot) == {1} and snapshot[1] is not gm
    assert snapshot[1].weight is gm.weight  # the copy's tensors are the user's
    assert arguments.rewritten(snapshot) is arguments
    node = next(n for n in gm.graph.nodes if n.op == "call_function")
    with gm.graph.inserting_after(node):
        gm.graph.call_function(torch.relu, (node,))
    gm.recompile()
    rewritten = arguments.rewritten(snapshot)
    assert rewritten.fresh == (1,) and rewritten.template[1] is snapshot[1]
    first, second = rewritten.fill([torch.ones(2)], [])[1], rewritten.fill([torch.ones(2)], [])[1]
    assert first is not second and first is not snapshot[1] and first.weight is gm.weight
