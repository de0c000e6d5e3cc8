"""The move queries: data dependencies plus alias-aware read/write order."""

from __future__ import annotations

import pytest
import torch
from conveyor_alias_db import AliasDb

aten = torch.ops.aten


def _chain(x, y):
    a = x + 1  # add
    b = y * 2  # mul
    x.add_(b)  # add_
    c = a.sin()  # sin
    d = y.cos()  # cos
    return c, d


@pytest.fixture
def chain(trace):
    t = trace(_chain, torch.randn(3), torch.randn(3))
    return t, AliasDb.from_graph(t.graph, [[t["x_1"]], [t["y_1"]]])


def test_independent_nodes_move_both_ways(chain):
    t, db = chain
    assert db.can_move_before(t["mul"], t["add"])
    assert db.can_move_after(t["add"], t["mul"])
    assert db.can_move_before(t["cos"], t["add"])
    assert db.can_move_after(t["mul"], t["cos"]) is False  # add_ uses mul


def test_data_dependencies_block_moves(chain):
    t, db = chain
    assert not db.can_move_before(t["add_"], t["mul"])
    assert not db.can_move_after(t["mul"], t["add_"])
    assert not db.can_move_before(t["sin"], t["add"])
    assert db.can_move_after(t["add"], t["cos"]) is False  # sin uses add


def test_reads_do_not_pass_writes_of_the_same_memory(chain):
    t, db = chain
    # add reads x, add_ writes x: neither may pass the other
    assert not db.can_move_after(t["add"], t["add_"])
    assert db.conflicts(t["add"], t["add_"])
    # cos reads y only: it may pass the write to x
    assert db.can_move_before(t["cos"], t["add_"])
    assert not db.conflicts(t["cos"], t["add_"])


def test_writes_and_reads_queries(chain):
    t, db = chain
    x, y = db.locations(t["x_1"]), db.locations(t["y_1"])
    assert db.writes(t["add_"]) == x
    assert db.reads(t["add_"]) == x | db.locations(t["mul"])
    assert db.reads(t["cos"]) == y and not db.writes(t["cos"])
    assert not db.reads(t["x_1"]) and not db.writes(t["x_1"])
    assert db.has_writers(t["x_1"]) and not db.has_writers(t["y_1"]) and not db.has_writers(t["sin"])


def test_moves_to_the_same_place_and_of_fixed_nodes(chain):
    t, db = chain
    output = next(n for n in t.graph.nodes if n.op == "output")
    assert db.can_move_before(t["add"], t["add"])
    assert db.can_move_before(t["add"], t["mul"])  # already right before it
    assert not db.can_move_before(t["x_1"], t["mul"])
    assert not db.can_move_after(t["cos"], output)
    assert not db.can_move_before(t["add"], t["y_1"])
    assert not db.can_move_after(t["add"], t["x_1"])  # would pass placeholder y_1


def test_queries_across_graphs_and_unknown_nodes_fail_clearly(chain, trace):
    t, db = chain
    other = trace(_chain, torch.randn(3), torch.randn(3))
    with pytest.raises(ValueError, match="different graphs"):
        db.can_move_before(t["add"], other["mul"])
    with pytest.raises(KeyError, match="does not know node"):
        db.may_alias(other["add"], t["add"])


def test_in_place_on_input_aliasing_a_view_of_another(trace):
    def f(base, view):
        view.mul_(2)
        return base.sum()

    base = torch.randn(4)
    t = trace(f, base, base[1:])
    db = AliasDb.from_graph(t.graph, [[t["base_1"], t["view_1"]]])
    mul_, total = t.ops(aten.mul_.Tensor)[0], t.ops(aten.sum.default)[0]
    assert db.writes_to(mul_, t["base_1"])
    assert not db.can_move_before(total, mul_)


def test_move_before_and_after_move_only_when_allowed(chain):
    t, db = chain
    assert db.move_before(t["cos"], t["add"])
    assert t["cos"].next is t["add"]
    assert not db.move_after(t["add"], t["add_"])
    assert t["add"].next is t["mul"]
    assert db.move_after(t["add"], t["mul"])
    assert t["mul"].next is t["add"]
    t.graph.lint()
    db.verify()
