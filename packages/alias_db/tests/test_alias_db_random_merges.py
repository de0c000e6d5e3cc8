"""Random merges (and moves, group merges and ungroupings) on random graphs with mutations: after every step
the analysis updated in place equals a rebuild (the check is on), and at the
end the rewritten graph computes what the original did, mutations of aliased
inputs included."""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest
import torch
import torch.fx
from conveyor_alias_db import AliasDb, group_of
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

aten = torch.ops.aten


def _scale_in_place(t: torch.Tensor) -> torch.Tensor:
    """A Python call the analysis cannot see into; it writes its argument."""
    return t.mul_(1.5)


#: name -> (callable target, number of tensor operands, extra constant args, returns a tuple)
OPS: dict[str, tuple[Callable[..., Any], int, tuple[Any, ...], bool]] = {
    "add": (aten.add.Tensor, 2, (), False),
    "mul": (aten.mul.Tensor, 2, (), False),
    "sin": (aten.sin.default, 1, (), False),
    "relu": (aten.relu.default, 1, (), False),
    "t": (aten.t.default, 1, (), False),
    "alias": (aten.alias.default, 1, (), False),
    "slice": (aten.slice.Tensor, 1, (0, 1, 3), False),
    "split": (aten.split.Tensor, 1, (2,), True),
    "var_mean": (aten.var_mean.correction, 1, ([0],), True),
    "add_": (aten.add_.Tensor, 2, (), False),
    "mul_": (aten.mul_.Tensor, 1, (0.5,), False),
    "copy_": (aten.copy_.default, 2, (), False),
    "add_out": (aten.add.out, 3, (), False),
    "rand_like": (aten.rand_like.default, 1, (), False),
    "opaque": (_scale_in_place, 1, (), False),
}


@dataclass(frozen=True)
class Step:
    """One op of a random program: ``OPS[name]`` on the values at ``operands``."""

    name: str
    operands: tuple[int, ...]


@dataclass(frozen=True)
class Program:
    """Inputs (some views of input 0) and the ops, all run once eagerly to make sure they are valid."""

    input_views: tuple[str, ...]
    steps: tuple[Step, ...]

    def inputs(self) -> list[torch.Tensor]:
        base = torch.arange(16, dtype=torch.float32).reshape(4, 4) / 7
        made = [base]
        for kind in self.input_views:
            made.append({"own": base.clone() + 1, "t": base.t(), "row": base[1:3]}[kind])
        return made

    def build(self) -> tuple[torch.fx.GraphModule, list[list[torch.fx.Node]]]:
        """The graph of the program and the input aliasing groups it was run with."""
        graph = torch.fx.Graph()
        values = [graph.placeholder(f"in{i}") for i in range(len(self.input_views) + 1)]
        for step in self.steps:
            target, _, extra, returns_tuple = OPS[step.name]
            tensors = [values[i] for i in step.operands]
            if step.name == "add_out":
                node = graph.call_function(target, (tensors[0], tensors[1]), {"out": tensors[2]})
            else:
                node = graph.call_function(target, (*tensors, *extra))
            if returns_tuple:
                values.extend(graph.call_function(operator.getitem, (node, i)) for i in range(2))
            else:
                values.append(node)
        graph.output(tuple(values))
        inputs = values[: len(self.input_views) + 1]
        shared = [inputs[0]] + [p for p, kind in zip(inputs[1:], self.input_views, strict=True) if kind != "own"]
        own = [[p] for p, kind in zip(inputs[1:], self.input_views, strict=True) if kind == "own"]
        return torch.fx.GraphModule(torch.nn.Module(), graph), [shared, *own]


def _run_eagerly(program: Program) -> list[torch.Tensor] | None:
    """The program's values when every op is valid in eager PyTorch, else ``None``."""
    values: list[Any] = program.inputs()
    for step in program.steps:
        target, _, extra, returns_tuple = OPS[step.name]
        tensors = [values[i] for i in step.operands]
        try:
            if step.name == "add_out":
                result = target(tensors[0], tensors[1], out=tensors[2])
            else:
                result = target(*tensors, *extra)
        except (RuntimeError, IndexError):
            return None
        if returns_tuple and len(result) != 2:
            return None  # the graph reads two elements
        values.extend(result[:2] if returns_tuple else [result])
    return values


@st.composite
def programs(draw: st.DrawFn) -> Program:
    input_views = tuple(draw(st.lists(st.sampled_from(["own", "t", "row"]), max_size=2)))
    n_values = len(input_views) + 1
    steps: list[Step] = []
    for _ in range(draw(st.integers(3, 14))):
        name = draw(st.sampled_from(sorted(OPS)))
        arity = OPS[name][1]
        operands = tuple(draw(st.integers(0, n_values - 1)) for _ in range(arity))
        candidate = Program(input_views, (*steps, Step(name, operands)))
        if _run_eagerly(candidate) is None:
            continue
        steps.append(Step(name, operands))
        n_values += 2 if OPS[name][3] else 1
    return Program(input_views, tuple(steps))


def _run(gm: torch.fx.GraphModule, program: Program) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    inputs = program.inputs()
    torch.manual_seed(0)
    outputs = gm(*inputs)
    return list(outputs), inputs


def _assert_same(expected: list[Any], got: list[Any]) -> None:
    for e, g in zip(expected, got, strict=True):
        torch.testing.assert_close(g, e, equal_nan=True)


def _neighbours(node: torch.fx.Node, distance: int = 3) -> list[torch.fx.Node]:
    """The nodes at most ``distance`` places before or after ``node``."""
    found = []
    for step in ("prev", "next"):
        current = node
        for _ in range(distance):
            current = getattr(current, step)
            if current.op == "root":
                break
            found.append(current)
    return found


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(program=programs(), data=st.data(), precise_inputs=st.booleans())
def test_random_merges_keep_the_analysis_and_the_results(program: Program, data: st.DataObject, precise_inputs: bool):
    reference, _ = program.build()
    expected_outputs, expected_inputs = _run(reference, program)

    gm, input_groups = program.build()
    db = AliasDb.from_graph(gm.graph, input_groups if precise_inputs else None, verify_updates=True)
    groups: list[torch.fx.Node] = []
    for _ in range(data.draw(st.integers(1, 12), label="merges")):
        candidates = [
            n
            for n in gm.graph.nodes
            if n.op == "call_function"
            and group_of(n) is None
            and not (n.target is operator.getitem and group_of(n.args[0]) is not None)
        ]
        if not candidates:
            break
        action = data.draw(st.sampled_from(["group", "merge", "move", "fold", "ungroup"]), label="action")
        if action in ("fold", "ungroup") and groups:
            group = data.draw(st.sampled_from(groups), label="group")
            if action == "ungroup":
                groups.remove(group)
                db.ungroup(group)
                continue
            before = group.prev.args[0] if group.prev.target is operator.getitem else group.prev
            other = data.draw(st.sampled_from(groups), label="other")
            if other is not group and other is before:
                db.merge_groups(group, other)
                groups.remove(other)
                event("folded")
            elif other is not group:
                with pytest.raises(ValueError, match="does not sit right before"):
                    db.merge_groups(group, other)
            continue
        if action == "move":
            node = data.draw(st.sampled_from(candidates), label="node")
            anchor = data.draw(st.sampled_from([n for n in gm.graph.nodes if n.op != "root"]), label="anchor")
            after = data.draw(st.booleans(), label="after")
            moved = db.move_after(node, anchor) if after else db.move_before(node, anchor)
            event("moved" if moved else "move refused")
            continue
        if not groups or action == "group":
            groups.append(db.create_group(data.draw(st.sampled_from(candidates), label="node")))
            continue
        group = data.draw(st.sampled_from(groups), label="group")
        near = [n for n in _neighbours(group) if n in candidates]
        node = data.draw(st.sampled_from(near if near and data.draw(st.booleans()) else candidates), label="node")
        try:
            db.merge_into_group(group, node)
            event("merged")
        except ValueError as refused:
            assert "cannot move past" in str(refused)
            event("refused")
    gm.graph.lint()
    gm.recompile()
    got_outputs, got_inputs = _run(gm, program)
    _assert_same(expected_outputs, got_outputs)
    _assert_same(expected_inputs, got_inputs)
