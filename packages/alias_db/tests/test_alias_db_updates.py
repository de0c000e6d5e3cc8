"""In-place updates, each with the rebuild-and-compare check on (conftest)."""

from __future__ import annotations

import operator

import pytest
import torch
import torch.fx
from conveyor_alias_db import AliasDb, AliasDbMismatch, FusedGroup, group_of

aten = torch.ops.aten


def _program(x, y):
    a = x + 1  # add
    b = a.view(-1)  # view
    b.mul_(2)  # mul_
    c = a * y  # mul
    d = c.relu()  # relu
    y.add_(1)  # add_
    return d, a


def _inputs():
    return torch.randn(2, 3), torch.randn(2, 3)


@pytest.fixture
def program(trace):
    t = trace(_program, *_inputs())
    return t, AliasDb.from_graph(t.graph, [[t["x_1"]], [t["y_1"]]])


def _same_as_eager(gm: torch.fx.GraphModule) -> None:
    """The rewritten graph computes what the program does, mutations included."""
    gm.graph.lint()
    gm.recompile()
    inputs = _inputs()
    expected_inputs = [t.clone() for t in inputs]
    expected = _program(*expected_inputs)
    got = gm(*inputs)
    for e, g in zip(expected, got, strict=True):
        torch.testing.assert_close(g, e)
    for e, g in zip(expected_inputs, inputs, strict=True):
        torch.testing.assert_close(g, e)


def test_create_value_is_fresh_memory(program):
    t, db = program
    with t.graph.inserting_after(t["add"]):
        fresh = t.graph.call_function(aten.zeros.default, ([2],))
    db.create_value(fresh)
    assert not db.may_alias(fresh, t["add"]) and not db.writes(fresh)


def test_create_value_for_a_view_is_caught_by_the_rebuild_check(program):
    t, db = program
    with t.graph.inserting_after(t["add"]):
        view = t.graph.call_function(aten.t.default, (t["add"],))
    with pytest.raises(AliasDbMismatch, match="value"):
        db.create_value(view)


def test_add_node_analyses_a_new_view(program):
    t, db = program
    with t.graph.inserting_after(t["add"]):
        view = t.graph.call_function(aten.t.default, (t["add"],))
    db.add_node(view)
    assert db.may_alias(view, t["add"]) and db.has_writers(view)


def test_copy_aliasing_gives_a_second_handle_the_same_memory(trace):
    t = trace(lambda x: x.split(2), torch.randn(4))
    db = AliasDb.from_graph(t.graph)
    first = t.ops(operator.getitem)[0]
    with t.graph.inserting_after(first):
        again = t.graph.call_function(operator.getitem, (t.ops(aten.split.Tensor)[0], 0))
    db.copy_aliasing(first, again)
    assert db.may_alias(again, t["x_1"]) and db.value_facts(again) == db.value_facts(first)


def test_replace_with_new_value_and_erase(program):
    t, db = program
    relu = t["relu"]
    with t.graph.inserting_after(relu):
        clamp = t.graph.call_function(aten.clamp_min.default, (t["mul"], 0.0))
    db.add_node(clamp)
    relu_memory = db.value_facts(relu)
    db.replace_with_new_value(relu, clamp)
    assert db.value_facts(clamp) == relu_memory
    assert relu not in set(db.nodes()) and relu not in t.graph.nodes
    _same_as_eager(t.gm)


def test_erase_node(program):
    t, db = program
    with t.graph.inserting_after(t["add"]):
        unused = t.graph.call_function(aten.sin.default, (t["add"],))
    db.add_node(unused)
    db.erase_node(unused)
    assert unused not in set(db.nodes())


def test_create_group_keeps_the_facts_on_the_new_output(program):
    t, db = program
    add = t["add"]
    view = t["view"]
    group = db.create_group(add)
    assert isinstance(group.target, FusedGroup) and group_of(group) is group.target
    element = next(iter(group.users))
    assert element.target is operator.getitem
    assert db.may_alias(element, view) and db.may_alias(group, view)
    assert db.reads(group) == db.locations(t["x_1"])
    _same_as_eager(t.gm)


def test_merge_a_consumer_into_the_group(program):
    t, db = program
    mul, relu = t["mul"], t["relu"]
    group = db.create_group(mul)
    db.merge_into_group(group, relu)
    inner = [n.target for n in group.target.graph.nodes if n.op == "call_function"]
    assert inner == [aten.mul.Tensor, aten.relu.default]
    assert len(group.users) == 1  # mul's value is only read inside now
    _same_as_eager(t.gm)


def test_merge_a_producer_into_the_group(program):
    t, db = program
    group = db.create_group(t["relu"])
    db.merge_into_group(group, t["mul"])
    assert [p.name for p in group.target.placeholders()] == ["add", "y_1"]
    assert len(group.args) == 2
    _same_as_eager(t.gm)


def test_merge_keeps_outputs_used_outside(program):
    t, db = program
    group = db.create_group(t["add"])
    db.merge_into_group(group, t["view"])  # add stays read outside (mul, output), view by mul_
    elements = sorted(group.users, key=lambda n: n.args[1])
    assert [e.args[1] for e in elements] == [0, 1]
    assert db.may_alias(elements[0], elements[1])
    assert db.writes_to(t["mul_"], elements[0])
    _same_as_eager(t.gm)


def test_merge_across_a_conflicting_write_is_refused(program):
    t, db = program
    group = db.create_group(t["add"])
    # mul reads add's memory, which mul_ (between them) writes: mul may not pass mul_
    with pytest.raises(ValueError, match="cannot move past .mul_."):
        db.merge_into_group(group, t["mul"])
    # mul_ writes add's memory, which mul reads: mul_ may not move down past mul
    group2 = db.create_group(t["relu"])
    with pytest.raises(ValueError, match="cannot move past .mul."):
        db.merge_into_group(group2, t["mul_"])
    _same_as_eager(t.gm)


def test_merge_an_in_place_op_into_the_group_of_its_producer(program):
    t, db = program
    group = db.create_group(t["view"])
    db.merge_into_group(group, t["mul_"])
    assert db.has_writers(t["add"]) and db.writes_to(group, t["add"])
    _same_as_eager(t.gm)


def test_merge_rejects_what_is_not_a_group_or_not_mergeable(program):
    t, db = program
    group = db.create_group(t["relu"])
    element = next(iter(group.users))
    with pytest.raises(ValueError, match="not a fusion group"):
        db.merge_into_group(t["add"], t["mul"])
    with pytest.raises(ValueError, match="placeholder"):
        db.merge_into_group(group, t["x_1"])
    with pytest.raises(ValueError, match="reads an output"):
        db.merge_into_group(group, element)
    other = db.create_group(t["add"])
    with pytest.raises(ValueError, match="groups are not nested"):
        db.merge_into_group(group, other)


def test_merge_a_producer_into_a_group_without_inputs(trace):
    def f():
        a = torch.ones(3)
        b = torch.rand(3)
        return b * 2, a

    t = trace(f)
    db = AliasDb.from_graph(t.graph)
    group = db.create_group(t.ops(aten.rand.default)[0])
    db.merge_into_group(group, t.ops(aten.ones.default)[0])
    inner = [n.target for n in group.target.graph.nodes if n.op == "call_function"]
    assert inner == [aten.ones.default, aten.rand.default]
    t.gm.recompile()
    torch.manual_seed(0)
    got = t.gm()
    torch.manual_seed(0)
    torch.testing.assert_close(got, f())


def test_a_wildcard_call_inside_a_group_still_escapes():
    graph = torch.fx.Graph()
    x, y = graph.placeholder("x"), graph.placeholder("y")
    first = graph.call_function(aten.sin.default, (x,))
    call = graph.call_function(_opaque, (first,))
    after = graph.call_function(aten.cos.default, (y,))
    graph.output((call, after))
    db = AliasDb.from_graph(graph, [[x], [y]], verify_updates=True)
    group = db.create_group(first)
    db.merge_into_group(group, call)
    element = next(iter(group.users))
    assert db.may_alias(element, group) and db.writes_to(group, group)
    assert db.can_move_before(after, group)


def _opaque(t):
    return t


def test_verify_reports_a_stale_analysis(program):
    t, db = program
    t["view"].target = aten.clone.default  # a rewrite the analysis was not told about
    with pytest.raises(AliasDbMismatch, match="view"):
        db.verify()


def test_updates_are_not_checked_when_the_switch_is_off(program, monkeypatch):
    t, _ = program
    db = AliasDb.from_graph(t.graph, verify_updates=False)
    with t.graph.inserting_after(t["add"]):
        view = t.graph.call_function(aten.t.default, (t["add"],))
    db.create_value(view)  # wrong, but unchecked
    with pytest.raises(AliasDbMismatch):
        db.verify()


def test_a_group_of_an_unread_in_place_op_keeps_its_write(program):
    t, db = program
    add_ = t["add_"]  # y.add_(1): its result is not read
    assert not add_.users
    group = db.create_group(add_)
    assert not group.users and group.target.outputs() == ()
    assert db.writes_to(group, t["y_1"]) and db.has_writers(t["y_1"])
    _same_as_eager(t.gm)
