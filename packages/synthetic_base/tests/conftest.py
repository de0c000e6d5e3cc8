"""Pipelines and the aliasing checker for the synthetic_base tests."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import conveyor
import conveyor_dedupe.plugin
import conveyor_synthetic_base.plugin
import pytest
import torch
from conveyor import Plugins
from conveyor.testing import check

Compile = Callable[[Any], Any]
MakeInputs = Callable[[torch.Tensor], Sequence[Any]]


@pytest.fixture
def stages_only(fresh_plugins: Plugins) -> Compile:
    """dedupe + synthetic_base + the eager backend: the inner graph keeps its
    in-place ops and runs them on the real base, so this tests the stage
    without any functionalization."""
    fresh_plugins.register(conveyor_dedupe.plugin, name="dedupe")
    fresh_plugins.register(conveyor_synthetic_base.plugin, name="synthetic_base")
    return lambda f: conveyor.compile(f, plugins=fresh_plugins, backend="eager")


#: the stages of the full pipeline up to the backend
FULL = ("dedupe", "synthetic_base", "functionalize", "autograd")


@pytest.fixture
def full() -> Compile:
    """The full pipeline (those of its stages that are installed) and the
    eager backend; other installed plugins are not loaded."""
    plugins = Plugins()
    plugins.load_entry_points(allow=FULL)
    return lambda f: conveyor.compile(f, plugins=plugins, backend="eager")


@pytest.fixture(params=["stages_only", "full"])
def pipeline(request: pytest.FixtureRequest) -> Compile:
    return request.getfixturevalue(request.param)


def check_aliased(
    program: Callable[..., Any],
    make_inputs: MakeInputs,
    shape: tuple[int, ...],
    requires_grad: bool,
    compile: Compile,
    seed: int = 0,
) -> Any:
    """``conveyor.testing.check`` on inputs made from one root tensor;
    returns what the check compared.

    With ``requires_grad``, the root is a non-leaf (``leaf * 1``) so views
    of it may be mutated as in eager; the checker compares gradients with
    respect to the leaf behind it."""
    gen = torch.Generator().manual_seed(seed)
    root = torch.randn(shape, dtype=torch.float64, generator=gen)
    if not requires_grad:
        return check(program, *make_inputs(root), compile=compile)
    return check(program, *make_inputs(root.requires_grad_() * 1), compile=compile)


def inner_input_count(compiled: Any, stage: str = "synthetic_base") -> int:
    """How many inputs the graph after ``stage`` takes (last call)."""
    (graph,) = [g.graph for g in conveyor.last_graphs(compiled) if g.stage == stage]
    return sum(1 for n in graph.graph.nodes if n.op == "placeholder")


@pytest.fixture(name="check_aliased")
def check_aliased_fixture() -> Callable[..., Any]:
    return check_aliased


@pytest.fixture(name="inner_input_count")
def inner_input_count_fixture() -> Callable[..., int]:
    return inner_input_count
