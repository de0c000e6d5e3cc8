"""Graphs with mutation are first-class: a backend that fuses greedily, with
legality from the analysis, runs programs that mutate (aliased) inputs through
``conveyor.compile`` without functionalization, and the checker compares every
output, input mutation and gradient with eager PyTorch."""

from __future__ import annotations

import operator
from collections.abc import Mapping
from typing import Any

import conveyor
import pytest
import torch
import torch.fx
from conveyor import CompiledFn, Request, StageSpec
from conveyor.testing import check
from conveyor_alias_db import AliasDb, group_of, input_aliasing


def _producer_group(node: torch.fx.Node) -> torch.fx.Node | None:
    """The group that computes the first grouped input of ``node``, if one does."""
    for arg in node.all_input_nodes:
        if _is_group_element(arg):
            return arg.args[0]
    return None


def _is_group_element(node: torch.fx.Node) -> bool:
    return node.target is operator.getitem and group_of(node.args[0]) is not None


class GreedyFusingBackend:
    """Puts every op into the group of its first grouped input when the
    analysis allows it (moving it up past the nodes in between), else into a
    new group; then runs the graph eagerly."""

    def __init__(self) -> None:
        self.merged = 0
        self.refused = 0

    def compile(self, request: Request, options: Mapping[str, Any]) -> CompiledFn:
        graph = torch.fx.Graph()
        graph.output(graph.graph_copy(request.graph.graph, {}))
        db = AliasDb.from_graph(graph, input_aliasing(graph, request.inputs), verify_updates=True)
        for node in list(graph.nodes):
            if node.op != "call_function" or group_of(node) is not None or _is_group_element(node):
                continue
            group = _producer_group(node)
            try:
                if group is None:
                    raise ValueError("no group yet")
                db.merge_into_group(group, node)
                self.merged += 1
            except ValueError:
                self.refused += group is not None
                db.create_group(node)
        gm = torch.fx.GraphModule(request.graph, graph)
        return lambda args: gm(*args)


@pytest.fixture
def fusing(fresh_plugins):
    backend = GreedyFusingBackend()
    fresh_plugins.register(
        _Stages(StageSpec(name="greedy_fusion", kind="backend", impl=backend)), name="greedy-fusion-test"
    )

    def compile(fn: Any) -> Any:
        return conveyor.compile(fn, plugins=fresh_plugins, backend="greedy_fusion")

    compile.backend = backend  # type: ignore[attr-defined]
    return compile


class _Stages:
    def __init__(self, spec: StageSpec) -> None:
        self._spec = spec

    @conveyor.hookimpl
    def conveyor_register_stages(self, register: Any) -> None:
        register(self._spec)


def _read_then_write(x, y):
    a = x.sin()
    x.mul_(2)
    b = a + x  # may not move up past the write to x
    return b * y, x.cos()


def _write_through_view(x):
    v = x[0]
    total = x.sum()
    v.mul_(2)  # writes x: may not move up past the sum
    v.add_(total)
    return total, v.cos()


def _aliased_inputs(a, b):
    c = b * 3
    d = a.relu()
    a.add_(1)  # a and b share memory: may not move up past the read of b
    c.mul_(d)  # d is fresh
    return c + b, a.relu()


def _out_argument(x, y, z):
    w = z.exp()
    v = x * y
    torch.add(x, y, out=z)  # may not move up past the read of z
    return w * v, v.neg()


def _split_and_mutate_pieces(x):
    first, second = x.split(2)
    s = x.sum(0)
    first.mul_(-1)  # may not move up past the sum
    second.add_(s)
    return x.tanh(), first


def _slice_write_read(x, y):
    tail = x[1:]
    z = x + 1
    tail.copy_(y[:-1])  # may not move up past the read of x
    w = z * 2
    x.zero_()
    return w, z, x


def _pure_with_grad(x, w):
    h = torch.nn.functional.relu(x @ w)
    return (h * h).sum(), h.t()


CASES = [
    (_read_then_write, lambda: (torch.randn(3), torch.randn(3))),
    (_write_through_view, lambda: (torch.randn(3, 3),)),
    (_aliased_inputs, lambda: _views_of_one(torch.randn(6))),
    (_out_argument, lambda: (torch.randn(4), torch.randn(4), torch.empty(4))),
    (_split_and_mutate_pieces, lambda: (torch.randn(4, 3),)),
    (_slice_write_read, lambda: (torch.randn(5), torch.randn(5))),
]


def _views_of_one(base: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    return base[:4], base[2:]


@pytest.mark.parametrize(("fn", "make_args"), CASES, ids=[c[0].__name__ for c in CASES])
def test_fused_graph_with_mutations_matches_eager(fusing, fn, make_args):
    check(fn, *make_args(), compile=fusing)
    assert fusing.backend.merged > 0 and fusing.backend.refused > 0


def test_fused_graph_gradients_match_eager(fusing):
    check(_pure_with_grad, torch.randn(3, 4, requires_grad=True), torch.randn(4, 2, requires_grad=True), compile=fusing)
    assert fusing.backend.merged > 0


def test_input_aliasing_groups_inputs_by_storage():
    base = torch.randn(6)
    graph = torch.fx.Graph()
    a, b, c, n = (graph.placeholder(name) for name in "abcn")
    graph.output((a, b, c))
    assert input_aliasing(graph, [base[:2], torch.randn(2), base[3:], 3]) == [[a, c], [b]]
    with pytest.raises(ValueError, match="3 values"):
        input_aliasing(graph, [base, base, base])


def test_getitem_of_a_group_reads_through():
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    sin = graph.call_function(torch.ops.aten.sin.default, (x,))
    graph.output((sin,))
    db = AliasDb.from_graph(graph, verify_updates=True)
    group = db.create_group(sin)
    element = next(iter(group.users))
    assert element.target is operator.getitem and not db.may_alias(element, x)
