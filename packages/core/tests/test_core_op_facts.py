"""``conveyor.schema``: the op facts every stage asks, pinned over every aten overload.

A change to the facts (a torch upgrade, an edit to the parser) shows up here as a
changed count or a changed named answer, to be judged, not as a silent change in
some stage's behaviour.
"""

from __future__ import annotations

import collections

import pytest
import torch
import torch.fx
from conveyor.schema import (
    OpFacts,
    is_effectful,
    is_random,
    is_view,
    op_facts,
    swaps_storage,
    writes,
    written_args,
)

aten = torch.ops.aten
CATEGORIES = ("writes", "writes_memory", "view", "storage_swap", "random", "effectful", "recomputable")


def _all_aten_overloads() -> list[torch._ops.OpOverload]:
    ops = []
    for schema in torch._C._jit_get_all_schemas():
        namespace, name = schema.name.split("::")
        if namespace == "aten":
            ops.append(getattr(getattr(aten, name), schema.overload_name or "default"))
    return ops


def _bindings_write(op: torch._ops.OpOverload) -> bool:
    """The old answer: any argument whose top-level annotation is a write."""
    return any(a.alias_info is not None and a.alias_info.is_write for a in op._schema.arguments)


def test_every_aten_overload_has_facts_and_the_counts_are_pinned() -> None:
    ops = _all_aten_overloads()
    assert len(ops) == len(set(ops)) == 3754
    counts: collections.Counter[str] = collections.Counter()
    for op in ops:
        facts = op_facts(op)
        assert isinstance(facts, OpFacts)
        assert not (facts.view and facts.writes_memory), op
        for category in CATEGORIES:
            counts[category] += bool(getattr(facts, category))
    assert dict(counts) == {
        "writes": 1466,
        "writes_memory": 1467,
        "view": 105,
        "storage_swap": 14,
        "random": 149,
        "effectful": 2,
        "recomputable": 2201,
    }


def test_the_only_differences_from_the_bindings_are_non_tensor_writes() -> None:
    """Where the schema bindings say "writes" and the facts do not, the argument
    written is a list, a dict or a generator (``aten.add_.t``, ``aten.sort.Tensor``
    reorders a list of tensors, ``aten.manual_seed.generator``): no tensor memory."""
    differ = [op for op in _all_aten_overloads() if _bindings_write(op) != op_facts(op).writes]
    assert len(differ) == 71
    for op in differ:
        assert _bindings_write(op) and not op_facts(op).writes
        written = [a for a in op._schema.arguments if a.alias_info is not None and a.alias_info.is_write]
        assert written and all(str(a.type).startswith(("List[", "Dict[", "Generator")) for a in written), op


@pytest.mark.parametrize(
    ("op", "expected"),
    [
        (aten.add_.Tensor, {"writes", "writes_memory"}),
        (aten.add.out, {"writes", "writes_memory"}),
        (aten._foreach_add_.Scalar, {"writes", "writes_memory"}),
        (aten.add.Tensor, {"recomputable"}),
        (aten.view.default, {"view", "recomputable"}),
        (aten.split.Tensor, {"view", "recomputable"}),
        (aten.transpose_.default, {"writes", "writes_memory"}),
        (aten.set_.source_Tensor, {"writes", "writes_memory", "storage_swap"}),
        (aten.set_data.default, {"writes", "writes_memory", "storage_swap"}),
        (aten.set.source_Tensor, {"storage_swap"}),
        (aten.bernoulli.default, {"random"}),
        (aten.native_dropout.default, {"random"}),
        (aten._linalg_check_errors.default, {"effectful"}),
        # the nine disputed overloads, decided by the schema
        (aten.native_batch_norm.default, {"writes_memory"}),
        (aten.add_.t, {"recomputable"}),
        (aten.mul_.t, {"recomputable"}),
        (aten.sort.int, {"recomputable"}),
        (aten.sort.Tensor, {"recomputable"}),
        (aten.select.t, {"recomputable"}),
    ],
)
def test_named_overloads(op: torch._ops.OpOverload, expected: set[str]) -> None:
    facts = op_facts(op)
    assert {c for c in CATEGORIES if getattr(facts, c)} == expected


def test_native_batch_norm_writes_only_undeclared_running_stats() -> None:
    aliasing = op_facts(aten.native_batch_norm.default).aliasing
    undeclared = {a.name for a in aliasing.args if a.is_write and not a.declared}
    assert undeclared == {"running_mean", "running_var"}
    assert op_facts(aten._native_batch_norm_legit.default).written == ((3, "running_mean"), (4, "running_var"))


def test_node_level_questions() -> None:
    def f(x: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        v = x.view(-1)
        torch.add(v, 1, out=out)
        return torch.nn.functional.dropout(out.add_(1), 0.5)

    from torch.fx.experimental.proxy_tensor import make_fx

    gm = make_fx(f)(torch.randn(2, 3), torch.empty(6))
    nodes = {str(n.target): n for n in gm.graph.nodes if n.op == "call_function"}
    view, add_out, add_ = nodes["aten.view.default"], nodes["aten.add.out"], nodes["aten.add_.Tensor"]
    assert is_view(view) and not writes(view)
    assert writes(add_out) and written_args(add_out) == [gm.graph.find_nodes(op="placeholder")[1]]
    assert writes(add_) and written_args(add_) == [add_out]
    assert any(is_random(n) for n in nodes.values())
    assert not any(swaps_storage(n) or is_effectful(n) for n in nodes.values())
    placeholder = next(iter(gm.graph.nodes))
    assert not (writes(placeholder) or is_view(placeholder) or is_random(placeholder))


def test_node_with_a_python_target_has_no_facts() -> None:
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    node = graph.call_function(torch.add, (x, 1))
    assert not (writes(node) or is_view(node) or swaps_storage(node) or is_random(node) or is_effectful(node))
    assert written_args(node) == []
