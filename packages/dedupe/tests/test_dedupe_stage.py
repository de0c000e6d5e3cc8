"""The dedupe stage against eager PyTorch, through ``conveyor.testing.check``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import conveyor
import pytest
import torch
from conveyor.testing import check


def _input(requires_grad: bool) -> torch.Tensor:
    x = torch.randn(3, 4, dtype=torch.float64, requires_grad=requires_grad)
    return x * 1 if requires_grad else x  # a non-leaf, so in-place ops are legal


def add(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a + b * 2


def mutate_one_read_other(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a.add_(1)
    return b * 2


def mutate_both_in_order(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    a.mul_(2)
    b.add_(1)
    a.mul_(3)
    return a + 1, b.sin()


def metadata_then_data(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a.t_()
    b.add_(torch.arange(3, dtype=b.dtype))  # b is transposed too: (4, 3)
    return b.sum(0)


def return_both_positions(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return a, b


PROGRAMS = [add, mutate_one_read_other, mutate_both_in_order, metadata_then_data, return_both_positions]
#: the checker takes gradients with respect to the inputs as they are after
#: the call; a mutated input then has an autograd node eager made inside the
#: program, which no compiled program reproduces, so gradients of mutating
#: programs are compared with respect to the leaf instead (test below)
READ_ONLY = (add, return_both_positions)


@pytest.mark.parametrize("program", [mutate_one_read_other, mutate_both_in_order, metadata_then_data])
def test_mutating_programs_give_eager_gradients(pipeline: Callable[[Any], Any], program: Any) -> None:
    grads = []
    for f in (program, pipeline(program)):
        leaf = torch.arange(12.0, dtype=torch.float64).view(3, 4).requires_grad_()
        x = leaf * 1
        outs = f(x, x)
        outs = outs if isinstance(outs, tuple) else (outs,)
        loss = sum((o * torch.arange(o.numel(), dtype=o.dtype).view(o.shape)).sum() for o in outs)
        grads.append(torch.autograd.grad(loss, leaf)[0])
    torch.testing.assert_close(grads[1], grads[0])


@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__)
def test_same_tensor_twice(pipeline: Callable[[Any], Any], program: Any, requires_grad: bool) -> None:
    x = _input(requires_grad)
    check(program, x, x, compile=pipeline, check_grads=not requires_grad or program in READ_ONLY)


@pytest.mark.parametrize("requires_grad", [False, True])
def test_leaf_passed_twice_gets_summed_gradient(dedupe_only: Callable[[Any], Any], requires_grad: bool) -> None:
    w = torch.randn(4, requires_grad=requires_grad)
    check(lambda a, b: (a * b).sum(), w, w, compile=dedupe_only)


def test_three_positions_among_others(pipeline: Callable[[Any], Any]) -> None:
    def f(a: torch.Tensor, k: int, b: torch.Tensor, y: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        a.add_(k)
        b.mul_(y)
        return c - y

    x, y = _input(False), _input(False)
    check(f, x, 2, x, y, x, compile=pipeline)


def test_duplicate_in_kwargs(pipeline: Callable[[Any], Any]) -> None:
    def f(a: torch.Tensor, *, scale: torch.Tensor) -> torch.Tensor:
        scale.mul_(2)
        return a * scale

    x = _input(False)
    check(f, x, scale=x, compile=pipeline)


def test_inner_graph_takes_each_tensor_once(dedupe_only: Callable[[Any], Any]) -> None:
    compiled = dedupe_only(mutate_both_in_order)
    x, y = torch.randn(3), torch.randn(3)
    compiled(x, x)
    graphs = {g.stage: g.graph for g in conveyor.last_graphs(compiled)}
    placeholders = [n for n in graphs["dedupe"].graph.nodes if n.op == "placeholder"]
    assert len(placeholders) == 1
    compiled(x, y)  # no duplicates: the stage passes the request through
    graphs = {g.stage: g.graph for g in conveyor.last_graphs(compiled)}
    assert len([n for n in graphs["dedupe"].graph.nodes if n.op == "placeholder"]) == 2


def test_same_object_and_equal_view_are_different_cache_entries(dedupe_only: Callable[[Any], Any]) -> None:
    compiled = dedupe_only(mutate_one_read_other)
    x = torch.zeros(3)
    same = compiled(x, x)  # b sees a's mutation
    assert torch.equal(same, torch.full((3,), 2.0))
    x = torch.zeros(3)
    y = x.view(3)  # same storage, sizes, strides: only identity differs
    view = compiled(x, y)  # b is a view of a: sees the mutation too, but through another object
    assert torch.equal(view, torch.full((3,), 2.0))
    fresh = compiled(torch.zeros(3), torch.zeros(3))
    assert torch.equal(fresh, torch.zeros(3))
    assert len(compiled.entries) == 3


def test_grad_mode_of_each_op_survives_the_retrace(dedupe_only: Callable[[Any], Any]) -> None:
    from conveyor.analysis.grad_regions import GRAD_META

    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            a.add_(1)
        return b * 2

    compiled = dedupe_only(f)
    x = _input(True)
    compiled(x, x)
    graphs = {g.stage: g.graph for g in conveyor.last_graphs(compiled)}
    (add,) = [n for n in graphs["dedupe"].graph.nodes if n.target == torch.ops.aten.add_.Tensor]
    assert add.meta.get(GRAD_META) is False


def test_called_under_no_grad_on_a_leaf(pipeline: Callable[[Any], Any]) -> None:
    leaf = torch.randn(3, dtype=torch.float64, requires_grad=True)
    with torch.no_grad():
        check(mutate_one_read_other, leaf, leaf, compile=pipeline, check_grads=False)
