"""The stage's run-time callable (its autograd.Function, made again on load)
survives the persistent compile cache."""

from __future__ import annotations

from pathlib import Path

import conveyor
import torch
from conveyor.testing.round_trip import check_round_trip


def test_a_loaded_training_program_gives_eager_gradients(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.LayerNorm(8), torch.nn.GELU(), torch.nn.Linear(8, 3))
    checked = check_round_trip(model, torch.randn(4, 6, requires_grad=True), folder=tmp_path)
    labels = [(g.stage, g.label) for g in conveyor.last_graphs(checked.compiled)]
    assert ("autograd", "forward") in labels and ("autograd", "backward") in labels


def test_a_loaded_program_keeps_its_backward_graph_for_compiled_autograd() -> None:
    from conveyor.protocol import artifacts

    def f(x: torch.Tensor) -> torch.Tensor:
        return (x.sin() * 2).sum()

    compiled = conveyor.compile(f, autoload=True, cache=False)
    x = torch.randn(5, requires_grad=True)
    compiled(x)
    run = compiled.last.compiled  # the autograd stage's callable: the stages outside it pass through
    loaded = artifacts.loads(artifacts.dumps(run))
    _, (layout, _, _, marker) = run.__conveyor_reduce__
    _, (_, _, _, again) = loaded.__conveyor_reduce__
    assert loaded is not run and again.layout == marker.layout == layout
    # Note [Values loaded on demand]: the graph is made when compiled autograd reads it, not at load
    assert not again.stored.loaded and again.undefined == marker.undefined
    assert again.graph.code == marker.graph.code and again.stored.loaded
    (out,) = loaded([x])
    out.backward()
    torch.testing.assert_close(x.grad, torch.autograd.grad(f(x), x)[0])
