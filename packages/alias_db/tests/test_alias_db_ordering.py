"""``memory_order`` (Note [Memory order edges]): its few edges per node order
exactly the pairs that the pairwise question (``AliasDb.conflicts`` between a
writer and any node, writers among themselves, barriers against writers)
orders, on the random programs of ``test_alias_db_random_merges``."""

from __future__ import annotations

import sys
from pathlib import Path

import torch
import torch.fx
from conveyor_alias_db import AliasDb, memory_order
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).parent))  # the random programs of the merge tests
from test_alias_db_random_merges import Program, programs  # noqa: E402

aten = torch.ops.aten
WRITERS = {aten.add_.Tensor, aten.mul_.Tensor, aten.copy_.default, aten.add.out}
BARRIERS = {aten.t.default, aten.alias.default, aten.slice.Tensor}


def _closure(edges: dict[torch.fx.Node, set[torch.fx.Node]], nodes: list[torch.fx.Node]) -> set[tuple]:
    """Pairs (earlier, later) such that later must follow earlier, transitively."""
    pairs: set[tuple] = set()
    below: dict[torch.fx.Node, set[torch.fx.Node]] = {}
    for node in nodes:  # program order: every edge points to an earlier node
        reach = set()
        for e in edges.get(node, ()):
            reach |= {e} | below[e]
        below[node] = reach
        pairs |= {(e, node) for e in reach}
    return pairs


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=programs(), precise_inputs=st.booleans())
def test_memory_order_orders_exactly_the_conflicting_pairs(program: Program, precise_inputs: bool):
    gm, groups = program.build()
    db = AliasDb.from_graph(gm.graph, groups if precise_inputs else None, verify_updates=False)
    nodes = [n for n in gm.graph.nodes if n.op == "call_function"]
    writer = lambda n: n.target in WRITERS  # noqa: E731
    barrier = lambda n: n.target in BARRIERS  # noqa: E731
    reduced = {n: set(e) for n, e in memory_order(db, nodes, writer=writer, barrier=barrier).items()}
    full: dict[torch.fx.Node, set[torch.fx.Node]] = {}
    for j, later in enumerate(nodes):
        for earlier in nodes[:j]:
            if not (writer(earlier) or writer(later)):
                continue
            other = later if writer(earlier) else earlier
            if writer(other) or barrier(other) or db.writes(other) or db.conflicts(earlier, later):
                full.setdefault(later, set()).add(earlier)
    for node, earlier in reduced.items():
        assert all(nodes.index(e) < nodes.index(node) for e in earlier)
    assert _closure(reduced, nodes) == _closure(full, nodes)


def test_a_reader_follows_only_the_last_writer_of_its_memory():
    graph = torch.fx.Graph()
    x, y = graph.placeholder("x"), graph.placeholder("y")
    w1 = graph.call_function(aten.add_.Tensor, (x, 1.0))
    w2 = graph.call_function(aten.mul_.Tensor, (y, 2.0))
    read_x = graph.call_function(aten.sin.default, (x,))
    read_new = graph.call_function(aten.cos.default, (read_x,))
    w3 = graph.call_function(aten.add_.Tensor, (x, 1.0))
    graph.output((read_new,))
    db = AliasDb.from_graph(graph, [[x], [y]], verify_updates=False)
    readers = {aten.sin.default, aten.cos.default}
    after = memory_order(db, [w1, w2, read_x, read_new, w3], writer=lambda n: n.target not in readers)
    assert after == {w2: [w1], read_x: [w1], w3: [w2, read_x]}


def test_memory_order_one_node_at_a_time_over_an_analysis_updated_in_place(trace):
    """``MemoryOrder`` asked as each node is reached, with earlier nodes merged into
    groups in between, answers what ``memory_order`` does over the original graph."""
    import torch
    from conveyor_alias_db import AliasDb, MemoryOrder, memory_order

    def f(x, y):
        a = x.sin()
        x.add_(1)
        b = y.cos() + a
        y.mul_(b)
        return a.exp(), x.relu(), b

    t = trace(f, torch.randn(4), torch.randn(4))
    body = [n for n in t.graph.nodes if n.op not in ("placeholder", "output")]
    writer = lambda n: n.target in (torch.ops.aten.add_.Tensor, torch.ops.aten.mul_.Tensor)  # noqa: E731
    expected = memory_order(AliasDb.from_graph(t.graph), body, writer=writer)
    db = AliasDb.from_graph(t.graph)
    order = MemoryOrder(db, writer=writer)
    group = None
    got = {}
    for node in body:
        edges = order.visit(node)
        if edges:
            got[node] = edges
        if writer(node):
            continue
        try:
            if group is None:
                raise ValueError("no group yet")
            db.merge_into_group(group, node)
        except ValueError:
            group = db.create_group(node)
    assert got == expected
