"""``conveyor.analysis.schema``: the op facts every stage asks, pinned over every aten overload.

A change to the facts (a torch upgrade, an edit to the parser) shows up here as a
broken rule or a changed named answer, to be judged, not as a silent change in
some stage's behaviour. The rules hold on every supported torch; the counts of
overloads differ between releases and are not pinned.
"""

from __future__ import annotations

import collections
from typing import Any

import pytest
import torch
import torch.fx
from conveyor.analysis.schema import (
    MUST_RUN_OPS,
    STORAGE_SWAPPING_OPS,
    UNDECLARED_WRITES,
    OpFacts,
    is_effectful,
    is_random,
    is_view,
    op_facts,
    swaps_storage,
    writes,
    written_args,
)
from torch._higher_order_ops.effects import has_effects

aten = torch.ops.aten
CATEGORIES = ("writes", "writes_memory", "view", "storage_swap", "random", "effectful", "recomputable")


def _all_aten_overloads() -> list[torch._ops.OpOverload]:
    ops = []
    for schema in torch._C._jit_get_all_schemas():
        namespace, name = schema.name.split("::")
        if namespace == "aten":
            ops.append(getattr(getattr(aten, name), schema.overload_name or "default"))
    return ops


def _annotated(a: Any, write: bool = False) -> bool:
    """A top-level tensor argument or return with an alias annotation (a write one)."""
    info = a.alias_info
    return info is not None and str(a.type) in ("Tensor", "Optional[Tensor]") and (info.is_write or not write)


def _type_of(op: torch._ops.OpOverload, name: str) -> str:
    return next(str(a.type) for a in op._schema.arguments if a.name == name)


def _bindings_write(op: torch._ops.OpOverload) -> bool:
    """The old answer: any argument whose top-level annotation is a write."""
    return any(a.alias_info is not None and a.alias_info.is_write for a in op._schema.arguments)


def test_every_aten_overload_has_facts_that_its_schema_and_tags_decide() -> None:
    """Each category, over every aten overload of the installed torch, is what
    the overload's own schema and tags say: the rule is pinned, not a count
    (torch 2.11 has 3852 overloads, 2.13 3754, 2.14 3757)."""
    ops = _all_aten_overloads()
    assert len(ops) == len(set(ops)) > 3000
    seen: collections.Counter[str] = collections.Counter()
    for op in ops:
        facts = op_facts(op)
        assert isinstance(facts, OpFacts)
        name = op._schema.name
        # the bindings give alias_info for top-level tensors only; lists are read from the text
        top_write = any(_annotated(a, write=True) for a in op._schema.arguments)
        list_write = [a for a in facts.aliasing.args if a.is_write and a.declared and not top_write]
        assert facts.writes == (top_write or bool(list_write)), op
        for a in list_write:
            assert "Tensor" in _type_of(op, a.name) and "List[" in _type_of(op, a.name), op
        assert facts.writes_memory == (facts.writes or name in UNDECLARED_WRITES), op
        assert not (facts.view and facts.writes_memory), op
        top_alias = any(_annotated(r) for r in op._schema.returns)
        if top_alias and not facts.writes:
            assert facts.view, op
        if facts.view and not top_alias:
            assert any(str(r.type).startswith("List[") for r in op._schema.returns), op
        assert facts.storage_swap == (name in STORAGE_SWAPPING_OPS), op
        assert facts.random == (torch.Tag.nondeterministic_seeded in op.tags), op
        assert facts.effectful == (name in MUST_RUN_OPS or has_effects(op)), op
        assert facts.recomputable == (
            not (facts.writes_memory or facts.storage_swap or facts.random or facts.effectful)
        ), op
        for category in CATEGORIES:
            seen[category] += bool(getattr(facts, category))
    # every category is met, and the big ones are big: a parser that stops reading
    # annotations would empty them
    assert min(seen.values()) > 0, seen
    assert seen["writes"] > 1000 and seen["view"] > 50 and seen["random"] > 100, seen


def test_every_op_that_takes_a_storage_swaps_storage() -> None:
    """An overload taking a ``Storage`` rebinds a tensor to it: a storage swap the
    schema cannot declare. Every such name is in ``STORAGE_SWAPPING_OPS``."""
    takers = {op._schema.name for op in _all_aten_overloads() if any(str(a.type) == "Storage" for a in op._schema.arguments)}
    assert takers and takers <= STORAGE_SWAPPING_OPS, takers - STORAGE_SWAPPING_OPS


@pytest.mark.skipif(not hasattr(aten, "shallow_copy_data_"), reason="this torch has no aten.shallow_copy_data_")
def test_shallow_copy_data_swaps_storage_in_eager_and_in_the_facts() -> None:
    a, b = torch.zeros(3), torch.ones(3)
    aten.shallow_copy_data_(a, b)
    assert a.untyped_storage().data_ptr() == b.untyped_storage().data_ptr()
    for name in aten.shallow_copy_data_.overloads():
        assert op_facts(getattr(aten.shallow_copy_data_, name)).storage_swap


def test_ops_that_only_raise_must_run_on_every_torch() -> None:
    """torch's effects table differs between releases (``_linalg_check_errors``
    is unmarked on 2.11 and 2.12): conveyor's answer does not."""
    for op in (aten._linalg_check_errors.default, aten._assert_async.default, aten._assert_scalar.default):
        assert op_facts(op).effectful and not op_facts(op).recomputable, op


def test_the_only_differences_from_the_bindings_are_non_tensor_writes() -> None:
    """Where the schema bindings say "writes" and the facts do not, the argument
    written is a list, a dict or a generator (``aten.add_.t``, ``aten.sort.Tensor``
    reorders a list of tensors, ``aten.manual_seed.generator``): no tensor memory."""
    differ = [op for op in _all_aten_overloads() if _bindings_write(op) != op_facts(op).writes]
    assert differ  # aten.add_.t at least
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
