"""What the stage refuses, and that it says so naming the stage and the cause."""

from __future__ import annotations

import conveyor
import conveyor_functionalize.plugin
import pytest
import torch
from conveyor.testing import check


@pytest.fixture
def only_functionalize(fresh_plugins: conveyor.Plugins) -> conveyor.Plugins:
    """The core and this stage, without dedupe / synthetic_base."""
    fresh_plugins.register(conveyor_functionalize.plugin, name="functionalize")
    return fresh_plugins


def compile_eager(fn):
    plugins = conveyor.Plugins()
    plugins.register(conveyor_functionalize.plugin, name="functionalize")
    return conveyor.compile(fn, plugins=plugins, backend="eager")


def add_one(x):
    x.add_(1)
    return (x * 2,)


def view_add_one(x):
    x[0].add_(1)
    return (x * 2,)


@pytest.mark.parametrize("fn", [add_one, view_add_one], ids=["leaf", "view_of_leaf"])
def test_writing_into_a_leaf_that_requires_grad_raises_what_eager_raises(fn) -> None:
    result = check(fn, torch.randn(3, requires_grad=True), compile=compile_eager)
    assert isinstance(result.compiled_out, RuntimeError)
    assert "leaf Variable that requires grad" in str(result.compiled_out)


def test_the_same_tensor_twice_and_mutated_needs_dedupe(only_functionalize: conveyor.Plugins) -> None:
    def f(x, y):
        x.add_(1)
        return (x + y,)

    t = torch.randn(3)
    with pytest.raises(conveyor.StageError, match="functionalize.*inputs 0 and 1 overlap.*dedupe"):
        conveyor.compile(f, plugins=only_functionalize, backend="eager")(t, t)


def test_overlapping_views_mutated_need_synthetic_base(only_functionalize: conveyor.Plugins) -> None:
    def f(a, b):
        a.mul_(2)
        return (b * 1,)

    base = torch.randn(4)
    with pytest.raises(conveyor.StageError, match="functionalize.*overlap.*synthetic_base"):
        conveyor.compile(f, plugins=only_functionalize, backend="eager")(base[:3], base[1:])


def test_views_that_share_storage_but_no_element_may_be_mutated(only_functionalize: conveyor.Plugins) -> None:
    def f(a, b):
        a.mul_(2)
        b.add_(1)
        return (a + b.sum(),)

    compile = lambda fn: conveyor.compile(fn, plugins=only_functionalize, backend="eager")  # noqa: E731
    base = torch.randn(4, 6)
    check(f, base[:, 0::2], base[:, 1::2], compile=compile)  # interleaved columns
    check(f, base[:2], base[2:], compile=compile)


def test_aliased_inputs_that_are_only_read_are_fine(only_functionalize: conveyor.Plugins) -> None:
    def f(a, b):
        return (a + b, a[0])

    base = torch.randn(4)
    check(f, base[:3], base[1:], compile=lambda fn: conveyor.compile(fn, plugins=only_functionalize, backend="eager"))


def test_a_dtype_view_that_cannot_be_replayed_is_refused() -> None:
    def f(x):
        x.t_()  # the recorded view ops start from x's metadata on entry: no replay
        return (x.view(torch.int32),)

    with pytest.raises(conveyor.StageError, match="functionalize.*output 0 views a tensor of dtype torch.float32 as"):
        compile_eager(f)(torch.randn(2, 4))


def test_the_stage_runs_and_stamps_its_graph() -> None:
    compiled = compile_eager(add_one)
    compiled(torch.randn(3))
    assert [g.stage for g in conveyor.last_graphs(compiled)] == ["capture", "functionalize", "eager"]


def test_the_stage_comes_after_dedupe_and_synthetic_base() -> None:
    spec = next(s for s in _registered() if s.name == "functionalize")
    assert spec.kind == "wrapper" and spec.after == ("dedupe", "synthetic_base")


def _registered() -> list[conveyor.StageSpec]:
    specs: list[conveyor.StageSpec] = []
    conveyor_functionalize.plugin.conveyor_register_stages(specs.append)
    return specs
