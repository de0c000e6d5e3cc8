"""The fuser's alias model is ``AliasDb`` (Note [Fusion in the AliasDb]): each group
is formed in its working copy by ``create_group`` / ``merge_into_group`` /
``merge_groups`` as it is decided, and the analysis updated in place equals a
rebuild.

These tests run the fusion pass alone (no kernels): the working copy, with its
``FusedGroup`` nodes, runs as a plain FX graph, so it is checked against the
original graph on real tensors, writes included.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.fx
from conveyor_alias_db import group_of, input_aliasing
from conveyor_triton.classify import classify
from conveyor_triton.decompose import table
from conveyor_triton.fusion import Fuser
from conveyor_triton.steps import Step, StepGraph
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from torch.fx.experimental.proxy_tensor import make_fx


def fuse(fn: Callable[..., Any], *args: torch.Tensor) -> tuple[torch.fx.GraphModule, Fuser]:
    """``fn`` traced (functionalize off: writes stay) and fused."""
    gm = make_fx(fn, tracing_mode="fake", decomposition_table=table())(*args)
    values = [n.meta["val"] for n in gm.graph.nodes if n.op == "placeholder"]
    classes = {n: classify(n) for n in gm.graph.nodes if n.op == "call_function"}
    fuser = Fuser(gm.graph, classes, input_aliasing(gm.graph, values))
    return gm, fuser


def check_recorded(fn: Callable[..., Any], *args: torch.Tensor) -> Fuser:
    """The working copy's analysis equals a rebuild, every group of the fuser is
    one group node holding exactly its members, and the fused copy computes
    what ``fn`` does (outputs and written inputs)."""
    gm, fuser = fuse(fn, *args)
    fuser.working.alias_db.verify()
    groups = [s.group for s in fuser.steps if s.group is not None and s.group.members]
    group_nodes = [n for n in fuser.working.graph.nodes if group_of(n) is not None]
    assert len(group_nodes) == len(groups)
    expected = sorted(sorted(str(m.target) for m in g.members) for g in groups)
    inner = [
        sorted(str(n.target) for n in group_of(g).graph.nodes if n.op == "call_function")  # type: ignore[union-attr]
        for g in group_nodes
    ]
    assert sorted(inner) == expected
    fused = torch.fx.GraphModule(torch.nn.Module(), fuser.working.graph)
    eager_args = [a.clone() for a in args]
    fused_args = [a.clone() for a in args]
    torch.testing.assert_close(fused(*fused_args), gm(*eager_args))
    torch.testing.assert_close(fused_args, eager_args)
    return fuser


def chain(x, y):
    return (x * y + 1).sigmoid() * torch.tanh(x) - y.exp() / 3


def norm_and_softmax(x, w, b):
    h = torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b)
    return torch.softmax(h * 2, -1), h.sum(0)


def writes(x, y):
    z = x * 2
    z.add_(y)
    return z.sin(), x.cos()


def mutations(a, v):
    s = a.sin()
    a.mul_(2)
    t = a.cos() + s
    v[0].add_(1)
    return t, v.sum(-1), a.exp()


def block(x, w, buf):
    h = torch.nn.functional.gelu(x @ w)
    buf.add_(h)
    v = h.view(4, 2, 4).transpose(1, 2).reshape(4, 8)
    buf.mul_(0.5)
    return x + v.relu() + buf.sum(-1, keepdim=True)


CASES = {
    "chain": (chain, [(4, 8), (4, 8)]),
    "norm_and_softmax": (norm_and_softmax, [(4, 8), (8,), (8,)]),
    "writes": (writes, [(4, 4), (4, 4)]),
    "mutations": (mutations, [(3, 4), (2, 4)]),
    "block": (block, [(4, 8), (8, 8), (4, 8)]),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_recorded_groups_equal_a_rebuild(name):
    fn, shapes = CASES[name]
    check_recorded(fn, *[torch.randn(s) for s in shapes])


def test_aliasing_inputs_keep_writes_in_order():
    a = torch.randn(3, 4)
    fuser = check_recorded(lambda x, y: (x.add_(1), y * 2), a, a[1])
    nodes = list(fuser.working.graph.nodes)
    (write,) = [n for n in nodes if n.target is torch.ops.aten.add_.Tensor]
    (group,) = [n for n in nodes if group_of(n) is not None]
    assert nodes.index(write) < nodes.index(group)  # y * 2 reads what add_ writes: it runs after it


def test_a_write_to_other_memory_does_not_split_a_group():
    fuser = check_recorded(writes, torch.randn(4, 4), torch.randn(4, 4))
    kernels = sorted(sorted(m.name for m in s.group.members) for s in fuser.steps if s.group and s.group.members)
    assert kernels == [["cos", "mul"], ["sin"]]  # x.cos() fuses with x * 2 across add_ (which writes z)


# -- random programs with writes -------------------------------------------------

OPS = ["add", "mul", "sin", "relu", "add_", "mul_", "view", "t", "sum"]


def program(steps: list[tuple[str, int, int]]) -> Callable[..., Any]:
    """A program over inputs ``a``, ``b`` (4 x 4) from ``(op, i, j)`` steps on a
    pool of values; in-place ops write pool values (inputs included)."""

    def fn(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        pool = [a, b]
        for op, i, j in steps:
            x, y = pool[i % len(pool)], pool[j % len(pool)]
            if op in ("add", "mul"):
                pool.append(getattr(torch, op)(x, y.reshape(x.shape) if y.numel() == x.numel() else 1.0))
            elif op in ("sin", "relu"):
                pool.append(getattr(torch, op)(x))
            elif op in ("add_", "mul_"):
                getattr(x, op)(y.sin().reshape(x.shape) if y.numel() == x.numel() else 0.5)  # fresh memory
            elif op == "view":
                pool.append(x.view(-1) if x.is_contiguous() else x.reshape(-1))
            elif op == "t":
                pool.append(x.t() if x.dim() == 2 else x)
            else:
                pool.append(x.sum(-1, keepdim=True))
        return tuple(pool[2:]) or (a + 0,)

    return fn


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 20), st.integers(0, 20)), min_size=1, max_size=12),
    alias=st.booleans(),
)
def test_random_programs_with_writes(steps, alias):
    a = torch.randn(4, 4)
    b = a.t() if alias else torch.randn(4, 4)
    check_recorded(program(steps), a, b)


# -- the step graph --------------------------------------------------------------


def _closure(deps: list[set[int]]) -> list[set[int]]:
    found: list[set[int]] = []
    for i in range(len(deps)):
        seen, stack = set(), list(deps[i])
        while stack:
            s = stack.pop()
            if s not in seen:
                seen.add(s)
                stack.extend(deps[s])
        found.append(seen)
    return found


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 30), st.integers(0, 30), st.booleans()), min_size=1, max_size=40))
def test_step_graph_ranks_answer_reachability(ops):
    """Dependencies added and steps folded in any legal order: ``reaches`` agrees
    with a search of the whole graph and the order is topological."""
    graph, deps = StepGraph(), []
    for a, b, fold in ops:
        if len(graph) < 2 or a % 3 == 0:
            earlier = {a % len(graph)} if len(graph) else set()
            graph.add(Step("aten", None, None, len(graph)), earlier)
            deps.append(set(earlier))
            continue
        x, y = a % len(graph), b % len(graph)
        if x == y:
            continue
        closure = _closure(deps)
        if fold:  # contract y into x unless a third step lies between them
            between = any(y in closure[d] for d in deps[x] - {y}) or any(x in closure[d] for d in deps[y] - {x})
            assert graph.reaches(graph.deps(x) - {y}, y) == any(y in closure[d] for d in deps[x] - {y})
            if between:
                continue
            graph.contract(x, y)
            deps[x] = (deps[x] | deps[y]) - {x, y}
            for d in deps:
                if y in d:
                    d.discard(y)
                    d.add(x)
            deps[x].discard(x)
            deps[y] = set()
        elif y not in closure[x]:  # y may depend on x (x does not depend on y)
            graph.depend(y, {x})
            deps[y].add(x)
        closure = _closure(deps)
        for i in range(len(graph)):
            assert graph.deps(i) == deps[i]
            for j in range(len(graph)):
                assert graph.reaches({i}, j) == (i == j or j in closure[i])
    position = {s: i for i, s in enumerate(graph.order())}
    assert all(position[d] < position[i] for i in range(len(graph)) for d in deps[i])


def test_group_getitems_are_read_by_group_index():
    gm, fuser = fuse(chain, torch.randn(4, 8), torch.randn(4, 8))
    for node in fuser.working.graph.nodes:
        for user in node.users:
            if group_of(node) is not None:
                assert user.target is operator.getitem
