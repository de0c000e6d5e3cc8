"""The stage as a whole: cache key, options, errors, the graph it hands on."""

from __future__ import annotations

from typing import Any

import conveyor
import pytest
import torch
from conveyor.testing import check


def mutate_first(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a.add_(1)
    return b * 2


def _graph(compiled: Any, stage: str) -> torch.fx.GraphModule:
    (graph,) = [g.graph for g in conveyor.last_graphs(compiled) if g.stage == stage]
    return graph


def test_overlap_pattern_is_part_of_the_cache_key(stages_only: Any) -> None:
    compiled = stages_only(mutate_first)
    x = torch.zeros(6)
    assert torch.equal(compiled(x[0:3], x[2:5]), torch.tensor([2.0, 0, 0]))  # b[0] sees the write
    x = torch.zeros(6)
    assert torch.equal(compiled(x[0:3], x[3:6]), torch.zeros(3))
    assert len(compiled.entries) == 2


def test_inputs_that_share_storage_without_a_common_tensor(stages_only: Any) -> None:
    x = torch.randn(8)
    other = torch.empty(0).set_(x.untyped_storage(), 2, (4,), (1,))
    assert other._base is None and x._base is None
    checked = check(mutate_first, x[0:4], other, compile=stages_only)
    placeholders = [n for n in _graph(checked.compiled, "synthetic_base").graph.nodes if n.op == "placeholder"]
    assert len(placeholders) == 1


def test_requires_grad_without_a_common_tensor_is_a_stage_error(stages_only: Any) -> None:
    x = torch.randn(8, requires_grad=True) * 1
    other = torch.empty(0).set_(x.untyped_storage(), 2, (4,), (1,)).requires_grad_()
    with pytest.raises(conveyor.StageError, match="synthetic_base.*not views of one tensor"):
        stages_only(mutate_first)(x[0:4], other)


def test_mixed_dtypes_are_a_stage_error(stages_only: Any) -> None:
    x = torch.zeros(8)
    with pytest.raises(conveyor.StageError, match="synthetic_base.*different dtypes"):
        stages_only(mutate_first)(x[0:4], x.view(torch.int32)[2:6])


@pytest.mark.parametrize(("tight", "numel"), [(True, 15), (False, 4096)])
def test_tight_option_sizes_the_base(fresh_plugins: Any, tight: bool, numel: int) -> None:
    import conveyor_synthetic_base.plugin

    fresh_plugins.register(conveyor_synthetic_base.plugin, name="synthetic_base")
    compiled = conveyor.compile(
        mutate_first, plugins=fresh_plugins, backend="eager", stages={"synthetic_base": {"tight": tight}}
    )
    big = torch.zeros(4096)
    compiled(big[100:110], big[105:115])
    (base,) = [n for n in _graph(compiled, "synthetic_base").graph.nodes if n.op == "placeholder"]
    assert base.meta["val"].numel() == numel


@pytest.mark.parametrize(
    "make", [lambda x: (x[0:3], x[2:5]), lambda x: (x, x[:, 2:5]), lambda x: (x.t(), x[:, 2:].diagonal())]
)
def test_merged_inputs_are_rebuilt_with_view_ops(stages_only: Any, make: Any) -> None:
    compiled = stages_only(mutate_first)
    compiled(*make(torch.zeros(6, 8)))
    targets = {n.target for n in _graph(compiled, "synthetic_base").graph.nodes if n.op == "call_function"}
    assert torch.ops.aten.as_strided.default not in targets


def test_metadata_mutation_is_applied_to_the_callers_tensor(stages_only: Any) -> None:
    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a.add_(1)
        b.t_()
        return b.sum(0)

    compiled = stages_only(f)
    x = torch.zeros(6, 8)
    a, b = x[0:3], x[2:5]
    compiled(a, b)
    assert b.shape == (8, 3) and b.stride() == (1, 8) and b.storage_offset() == 16
    (output,) = [n for n in _graph(compiled, "synthetic_base").graph.nodes if n.op == "output"]
    assert len(output.args[0]) == 2  # the user's output, then b as the program leaves it


@pytest.mark.parametrize("pipeline_name", ["stages_only", "full"])
def test_called_under_no_grad_on_views_of_a_leaf(pipeline_name: str, request: pytest.FixtureRequest) -> None:
    compile = request.getfixturevalue(pipeline_name)
    leaf = torch.randn(6, dtype=torch.float64, requires_grad=True)
    with torch.no_grad():
        check(mutate_first, leaf[0:3], leaf[2:5], compile=compile)
