"""The ``inductor`` backend against eager, on both entry points: inference,
training (forward and backward graphs each through Inductor), symbolic sizes,
the disk cache, and the errors it raises."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import conveyor
import pytest
import torch
import torch._inductor.config as inductor_config
from conveyor import Config, Pipeline, StageError
from conveyor.testing import check
from conveyor.testing.round_trip import check_round_trip
from conveyor_inductor import probe, programs


def standalone(f: Any, **options: Any) -> Any:
    return conveyor.compile(f, backend="inductor", **options)


def behind_dynamo(f: Any, **options: Any) -> Any:
    return torch.compile(f, backend="conveyor", options={"backend": "inductor", **options})


ENTRIES: list[Callable[..., Any]] = [standalone, behind_dynamo]
entries = pytest.mark.parametrize("entry", ENTRIES, ids=["conveyor.compile", "torch.compile"])


def fused(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = torch.nn.functional.gelu(a * b + 1)
    return y.softmax(-1), y.t()  # a reduction, pointwise work, a view of a result


def mlp() -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.LayerNorm(32), torch.nn.Linear(32, 8))


@entries
def test_inference_runs_inductors_kernels(entry: Callable[..., Any]) -> None:
    a, b = torch.randn(8, 16), torch.randn(8, 16)
    with torch.no_grad():
        checked = check(fused, a, b, compile=entry)
    (made,) = programs(checked.compiled)
    assert made.label == "forward" and made.devices == ("cpu",)
    assert "cpp_fused" in made.source  # Inductor's C++ kernels, not aten calls
    stamped = [g for g in conveyor.last_graphs(checked.compiled) if g.stage == "inductor"]
    assert [g.artifact for g in stamped] == [made]


@entries
def test_training_compiles_forward_and_backward_with_inductor(entry: Callable[..., Any]) -> None:
    checked = check(mlp(), torch.randn(4, 16), compile=entry)
    assert [p.label for p in programs(checked.compiled)] == ["forward", "backward"]
    assert all("cpp_fused" in p.source for p in programs(checked.compiled))


def test_symbolic_sizes_compile_once_with_inductors_guards() -> None:
    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (x @ w).relu().sum(0) / x.shape[0]

    w = torch.randn(6, 5)
    compiled = standalone(f, dynamic=True)
    for n in (3, 7, 12):
        check(f, torch.randn(n, 6), w, compile=lambda _, c=compiled: c)
    symbolic = [g for g in conveyor.last_graphs(compiled) if g.stage == "inductor"]
    assert len(symbolic) == 1
    assert any(
        isinstance(p.meta.get("val"), torch.Tensor) and not isinstance(p.meta["val"].shape[0], int)
        for p in symbolic[0].graph.graph.find_nodes(op="placeholder")
    )
    with torch.no_grad():  # size 1 differs from what the symbol assumed (s0 >= 2): checked, compiled again
        check(f, torch.randn(1, 6), w, compile=lambda _, c=compiled: c)


def test_symbolic_sizes_behind_dynamo() -> None:
    model = mlp()
    compiled = torch.compile(model, backend="conveyor", options={"backend": "inductor"}, dynamic=True)
    for n in (3, 5, 9):
        x = torch.randn(n, 16)
        torch.testing.assert_close(compiled(x), model(x))


def test_a_stored_program_is_compiled_again_on_load(tmp_path: Path) -> None:
    checked = check_round_trip(mlp(), torch.randn(4, 16), folder=tmp_path, backend="inductor")
    assert [p.label for p in programs(checked.compiled)] == ["forward", "backward"]


def test_a_graph_that_writes_needs_functionalize() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        x.mul_(2)
        return x + 1

    with pytest.raises(StageError, match="'inductor': the graph writes to tensors.*functionalize"):
        standalone(f, disable=["functionalize"])(torch.randn(3))


def test_grad_without_the_autograd_stage_is_refused() -> None:
    with pytest.raises(StageError, match="'inductor': inputs require grad.*autograd stage"):
        standalone(mlp(), disable=["autograd"])(torch.randn(2, 16))


def test_no_cxx_compiler_is_a_clear_error() -> None:
    # config.patch, not monkeypatch: pytest 9's undo deletes an attribute the proxy's __dict__ lacks,
    # which removes Inductor's cpp.cxx setting for the rest of the process
    with inductor_config.patch({"cpp.cxx": ("conveyor-no-such-c++",)}):
        with pytest.raises(StageError, match=r"'inductor': no C\+\+ compiler.*conveyor-no-such-c\+\+.*Install g\+\+"):
            with torch.no_grad():
                standalone(fused)(torch.randn(2, 3), torch.randn(2, 3))
    assert inductor_config.cpp.cxx != ("conveyor-no-such-c++",)


def test_a_torch_without_compile_fx_inner_fails_when_the_pipeline_is_built(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch._inductor.compile_fx as compile_fx

    probe.api.cache_clear()
    monkeypatch.delattr(compile_fx, "compile_fx_inner")
    try:
        with pytest.raises(
            StageError, match=r"'inductor': this torch has no torch._inductor.compile_fx.compile_fx_inner"
        ):
            Pipeline(Config(backend="inductor"))
        assert Pipeline(Config(backend="eager")).backend.name == "eager"  # installed, not chosen: not probed
    finally:
        probe.api.cache_clear()
