"""Each op family: what the analysis says about the values and the writes."""

from __future__ import annotations

import operator

import pytest
import torch
import torch.fx
from conveyor_alias_db import RNG, WILDCARD, AliasDb
from torch.fx.experimental.proxy_tensor import make_fx

aten = torch.ops.aten


def test_views_alias_their_base_and_each_other(trace):
    def f(x):
        return x.view(-1), x.t(), x[1:], x.expand(2, 4, 4), x + 1

    t = trace(f, torch.randn(4, 4))
    db = AliasDb.from_graph(t.graph)
    x = t["x_1"]
    views = [
        t.ops(aten.view.default)[0],
        t.ops(aten.t.default)[0],
        t.ops(aten.slice.Tensor)[0],
        t.ops(aten.expand.default)[0],
    ]
    fresh = t.ops(aten.add.Tensor)[0]
    for view in views:
        assert db.may_alias(view, x)
        assert not db.may_alias(view, fresh)
        assert not db.writes(view)
    assert db.may_alias(views[0], views[3])
    assert not db.may_alias(fresh, x)


def test_in_place_op_writes_its_self_and_returns_it(trace):
    def f(x, y):
        x.add_(y)
        return x

    t = trace(f, torch.randn(3), torch.randn(3))
    db = AliasDb.from_graph(t.graph, [[t["x_1"]], [t["y_1"]]])
    add_ = t.ops(aten.add_.Tensor)[0]
    assert db.writes(add_) == db.locations(t["x_1"])
    assert db.reads(add_) == db.locations(t["x_1"]) | db.locations(t["y_1"])
    assert db.may_alias(add_, t["x_1"])
    assert db.writes_to(add_, t["x_1"]) and not db.writes_to(add_, t["y_1"])


def test_write_through_a_view_writes_the_base(trace):
    def f(x):
        v = x[0]
        v.mul_(2)
        return x.sum()

    t = trace(f, torch.randn(3, 3))
    db = AliasDb.from_graph(t.graph)
    mul_ = t.ops(aten.mul_.Tensor)[0]
    assert db.writes_to(mul_, t["x_1"])
    assert db.has_writers(t["x_1"])
    assert db.writers(t["x_1"]) == {mul_}
    total = t.ops(aten.sum.default)[0]
    assert db.conflicts(mul_, total)
    assert not db.can_move_before(total, mul_)


def test_out_argument_is_written(trace):
    def f(x, y, out):
        torch.add(x, y, out=out)
        return out

    t = trace(f, torch.randn(3), torch.randn(3), torch.empty(3))
    db = AliasDb.from_graph(t.graph, [[t["x_1"]], [t["y_1"]], [t["out_1"]]])
    add = t.ops(aten.add.out)[0]
    assert db.writes(add) == db.locations(t["out_1"])
    assert db.may_alias(add, t["out_1"]) and not db.may_alias(add, t["x_1"])
    assert not db.has_writers(t["x_1"]) and db.has_writers(t["out_1"])


def test_multi_output_views_alias_the_input_and_each_other(trace):
    def f(x):
        a, b = x.split(2)
        c, d = x.unbind(1)
        return a, b, c, d, x + 1

    t = trace(f, torch.randn(4, 2))
    db = AliasDb.from_graph(t.graph)
    items = t.ops(operator.getitem)
    assert len(items) == 4
    for item in items:
        assert db.may_alias(item, t["x_1"])
        for other in items:
            assert db.may_alias(item, other)
        assert not db.may_alias(item, t.ops(aten.add.Tensor)[0])


def test_tuple_outputs_are_fresh_and_distinct(trace):
    def f(x):
        values, indices = x.max(0)
        var, mean = torch.var_mean(x)
        return values, indices, var, mean

    t = trace(f, torch.randn(4, 2))
    db = AliasDb.from_graph(t.graph)
    items = t.ops(operator.getitem)
    assert len(items) == 4
    for i, item in enumerate(items):
        assert not db.may_alias(item, t["x_1"])
        for other in items[i + 1 :]:
            assert not db.may_alias(item, other)
    assert db.may_alias(items[0], t.ops(aten.max.dim)[0])


def test_inputs_may_alias_by_default_and_groups_separate_them(trace):
    t = trace(lambda a, b, c: (a + b + c,), torch.randn(2), torch.randn(2), torch.randn(2))
    a, b, c = t["a_1"], t["b_1"], t["c_1"]
    anything = AliasDb.from_graph(t.graph)
    assert anything.may_alias(a, b) and anything.may_alias(b, c)
    grouped = AliasDb.from_graph(t.graph, [[a, b], [c]])
    assert grouped.may_alias(a, b) and not grouped.may_alias(a, c) and not grouped.may_alias(b, c)
    unlisted = AliasDb.from_graph(t.graph, [[a]])
    assert not unlisted.may_alias(a, b) and not unlisted.may_alias(b, c)


def test_input_aliasing_rejects_bad_groups(trace):
    t = trace(lambda a, b: (a + b,), torch.randn(2), torch.randn(2))
    add = t.ops(aten.add.Tensor)[0]
    with pytest.raises(ValueError, match="not a placeholder"):
        AliasDb.from_graph(t.graph, [[add]])
    with pytest.raises(ValueError, match="two groups"):
        AliasDb.from_graph(t.graph, [[t["a_1"]], [t["a_1"]]])


def test_write_to_one_input_orders_reads_of_an_input_that_may_alias_it(trace):
    def f(a, b):
        a.mul_(2)
        return b + 1

    t = trace(f, torch.randn(2), torch.randn(2))
    mul_, add = t.ops(aten.mul_.Tensor)[0], t.ops(aten.add.Tensor)[0]
    assert not AliasDb.from_graph(t.graph).can_move_before(add, mul_)
    assert AliasDb.from_graph(t.graph, [[t["a_1"]], [t["b_1"]]]).can_move_before(add, mul_)


def _graph_with_python_call(fn):
    graph = torch.fx.Graph()
    x, y, z = graph.placeholder("x"), graph.placeholder("y"), graph.placeholder("z")
    call = graph.call_function(fn, (x,))
    add = graph.call_function(aten.add.Tensor, (y, 1))
    graph.output((call, add, z))
    return graph, x, y, z, call, add


def _opaque(t):
    return t


def test_unknown_python_call_is_a_wildcard():
    graph, x, y, z, call, add = _graph_with_python_call(_opaque)
    db = AliasDb.from_graph(graph, [[x], [y], [z]])
    assert WILDCARD in db.writes(call) and db.writes_to(call, x)
    assert db.may_alias(call, x) and not db.may_alias(call, y) and not db.may_alias(x, y)
    assert db.has_writers(x) and not db.has_writers(y) and not db.has_writers(z)
    assert db.escaped() == db.value_facts(x).locs
    assert db.can_move_before(add, call)


def test_without_input_aliasing_inputs_may_be_anything_an_unknown_call_reaches():
    graph, x, y, z, call, add = _graph_with_python_call(_opaque)
    db = AliasDb.from_graph(graph)
    assert db.may_alias(call, y) and db.writes_to(call, z)
    assert not db.can_move_before(add, call)


def test_call_module_and_get_attr_are_wildcards():
    root = torch.nn.Module()
    root.lin = torch.nn.Linear(2, 2)
    root.register_buffer("buf", torch.zeros(2))
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    buf = graph.get_attr("buf")
    lin = graph.call_module("lin", (x,))
    graph.output((lin, buf))
    db = AliasDb.from_graph(graph)
    assert db.may_alias(buf, lin) and db.may_alias(lin, x)
    assert db.writes_to(lin, buf)


def test_set_is_a_wildcard_so_both_tensors_may_alias_afterwards(trace):
    def f(a, b):
        a.set_(b)
        return a + 1

    t = trace(f, torch.randn(2), torch.randn(2))
    db = AliasDb.from_graph(t.graph, [[t["a_1"]], [t["b_1"]]])
    assert db.may_alias(t["a_1"], t["b_1"])
    assert db.writes_to(t.ops(aten.set_.source_Tensor)[0], t["b_1"])


def test_random_ops_keep_their_order(trace):
    def f(x):
        a = torch.rand(3)
        b = torch.rand(3)
        return a + x, b

    t = trace(f, torch.randn(3))
    db = AliasDb.from_graph(t.graph)
    first, second = t.ops(aten.rand.default)
    assert RNG in db.writes(first) and db.conflicts(first, second)
    assert not db.can_move_before(second, first)
    assert not db.may_alias(first, second)


def test_undeclared_batch_norm_writes_are_known(trace):
    def f(x, mean, var):
        return aten.native_batch_norm(x, None, None, mean, var, True, 0.1, 1e-5)

    t = trace(f, torch.randn(4, 3), torch.zeros(3), torch.ones(3))
    db = AliasDb.from_graph(t.graph, [[t["x_1"]], [t["mean_1"]], [t["var_1"]]])
    bn = t.ops(aten.native_batch_norm.default)[0]
    assert db.writes_to(bn, t["mean_1"]) and db.writes_to(bn, t["var_1"]) and not db.writes_to(bn, t["x_1"])


def test_foreach_in_place_writes_every_list_element(trace):
    def f(a, b, c):
        torch._foreach_add_([a, b], [c, c])
        return a, b

    t = trace(f, torch.randn(2), torch.randn(2), torch.randn(2))
    db = AliasDb.from_graph(t.graph, [[t["a_1"]], [t["b_1"]], [t["c_1"]]])
    op = t.ops(aten._foreach_add_.List)[0]
    assert db.writes_to(op, t["a_1"]) and db.writes_to(op, t["b_1"]) and not db.writes_to(op, t["c_1"])


def test_sizes_never_alias():
    gm = make_fx(lambda x: x.new_zeros(x.shape[0]) + x, tracing_mode="symbolic")(torch.randn(3))
    db = AliasDb.from_graph(gm.graph)
    sizes = [n for n in gm.graph.nodes if n.target is aten.sym_size.int]
    assert sizes
    for size in sizes:
        assert not db.locations(size)
        assert not db.may_alias(size, size)
