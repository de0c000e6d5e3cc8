"""Pipelines and the aliasing checker for the synthetic_base tests."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import conveyor
import conveyor_dedupe.plugin
import conveyor_synthetic_base.plugin
import pytest
import torch
import torch.utils._pytree as pytree
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
    returns what the first check compared.

    With ``requires_grad``, the root is a non-leaf (``leaf * 1``) so views
    of it may be mutated as in eager, and gradients are compared with respect
    to the leaf. The checker's own gradient comparison takes gradients with
    respect to the inputs as they are *after* the call; an input that is
    mutated, or views a mutated tensor, has a new autograd node then that
    eager created inside the program and no compiled program can reproduce,
    so that comparison is switched off here (see this package's README).
    """
    gen = torch.Generator().manual_seed(seed)
    root = torch.randn(shape, dtype=torch.float64, generator=gen)
    if not requires_grad:
        return check(program, *make_inputs(root), compile=compile)
    leaf = root.clone().requires_grad_()
    checked = check(program, *make_inputs(leaf * 1), compile=compile, check_grads=False)
    e_leaf, c_leaf = root.clone().requires_grad_(), root.clone().requires_grad_()
    e_outs = pytree.tree_leaves(program(*make_inputs(e_leaf * 1)))
    c_outs = pytree.tree_leaves(compile(program)(*make_inputs(c_leaf * 1)))
    pairs = [(e, c) for e, c in zip(e_outs, c_outs) if isinstance(e, torch.Tensor) and e.requires_grad]
    if not pairs:
        return checked
    weights = [torch.randn(e.shape, dtype=e.dtype, generator=gen) for e, _ in pairs]
    e_loss = sum((e * w).sum() for (e, _), w in zip(pairs, weights))
    c_loss = sum((c * w).sum() for (_, c), w in zip(pairs, weights))
    (e_grad,) = torch.autograd.grad(e_loss, e_leaf, allow_unused=True)
    (c_grad,) = torch.autograd.grad(c_loss, c_leaf, allow_unused=True)
    if e_grad is None:
        assert c_grad is None or not c_grad.any(), "compiled has a gradient for the root, eager has none"
        return checked
    assert c_grad is not None, "eager has a gradient for the root, compiled has none"
    torch.testing.assert_close(c_grad, e_grad, msg=lambda m: f"gradient of the root: {m}")
    return checked


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
