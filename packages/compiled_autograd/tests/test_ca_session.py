"""enable(): option checking, the state it restores, its entry as a tool."""

from __future__ import annotations

import copy

import conveyor
import conveyor_compiled_autograd as cca
import pytest
import torch
from ca_helpers import assert_same_grads, mlp
from conveyor.cli import main as conveyor_main
from torch._dynamo import compiled_autograd as ca


def test_bad_backend_fails_at_enable_with_the_choices() -> None:
    with pytest.raises(conveyor.ConfigError, match="eager"):
        with cca.enable(backend="no_such_backend"):
            pytest.fail("the body must not run")


def test_unknown_stage_option_fails_at_enable() -> None:
    with pytest.raises(conveyor.ConfigError, match="partitioner"):
        with cca.enable(stages={"autograd": {"no_such_option": 1}}):
            pytest.fail("the body must not run")


def test_unknown_key_fails_at_enable() -> None:
    with pytest.raises(conveyor.ConfigError, match="valid keys"):
        with cca.enable(bakend="eager"):
            pytest.fail("the body must not run")


def _one_step(model: torch.nn.Module) -> None:
    model(torch.randn(3, 4)).pow(2).sum().backward()


def test_autograd_outside_the_context_is_untouched() -> None:
    model = mlp()
    with cca.enable() as session:
        _one_step(model)
    assert session.captures == 1
    assert not ca.compiled_autograd_enabled
    _one_step(model)  # eager again: no capture
    assert session.captures == 1


def test_state_restored_after_an_exception() -> None:
    model = mlp()
    with pytest.raises(KeyError, match="boom"):
        with cca.enable() as session:
            _one_step(model)
            raise KeyError("boom")
    assert session.captures == 1
    _one_step(model)
    assert session.captures == 1 and not ca.compiled_autograd_enabled


def test_restores_torch_own_compiled_autograd() -> None:
    """Inside torch's ``_enable``: ours captures, theirs resumes after."""
    theirs: list[torch.fx.GraphModule] = []
    model, ref = mlp(), mlp()
    with ca._enable(lambda gm: theirs.append(gm) or gm):
        with cca.enable() as session:
            _one_step(model)
        assert session.captures == 1 and not theirs
        _one_step(model)
        assert len(theirs) == 1 and session.captures == 1
        assert ca.compiled_autograd_enabled
    x = torch.randn(3, 4)
    torch.manual_seed(0)
    for m in (model, ref):
        m.zero_grad()
    with cca.enable():
        model(x).pow(2).sum().backward()
    ref(x).pow(2).sum().backward()
    assert_same_grads(ref.parameters(), model.parameters())


def test_session_history_and_last() -> None:
    model = mlp()
    with cca.enable() as session:
        assert session.last is None and session.captures == 0
        _one_step(model)  # .grad is None: one capture
        _one_step(model)  # .grad defined: another (torch's engine keys on it)
        _one_step(model)
    assert session.captures == 2
    assert session.last is session.history[-1]
    assert session.last.opaque == () and session.last.inlined == 0
    stages = [g.stage for g in session.last.graphs]
    assert stages[0] == "compiled_autograd" and stages[-1] == "eager" and "functionalize" in stages


def test_listed_as_a_tool_with_its_distribution(capsys: pytest.CaptureFixture[str]) -> None:
    assert conveyor_main(["stages"]) == 0
    out = capsys.readouterr().out
    line = next(row for row in out.splitlines() if " compiled_autograd " in row)
    assert " tool " in line and "not a pipeline stage" in line and "conveyor-compiled-autograd" in line
    assert "compiled_autograd: `with conveyor_compiled_autograd.enable(): loss.backward()`; options inline=True" in out
    assert "compiled_autograd" not in out.split("pipeline: ")[-1]


def test_it_is_no_stage_of_a_forward_pipeline() -> None:
    pipeline = conveyor.Pipeline(conveyor.resolve({}))
    assert "compiled_autograd" in pipeline.tools and "compiled_autograd" not in pipeline.available
    with pytest.raises(conveyor.ConfigError, match=r"'compiled_autograd' is a tool, not a stage .*enable\(\)"):
        conveyor.compile(mlp(), enable=["compiled_autograd"])


def test_its_options_are_checked_at_enable() -> None:
    with pytest.raises(conveyor.ConfigError, match=r"tool 'compiled_autograd': unknown option\(s\) \['inlin'\]; valid options are \['inline'\]"):
        with cca.enable(stages={"compiled_autograd": {"inlin": False}}):
            pytest.fail("the body must not run")


def test_inline_off_calls_conveyor_backward_graphs_opaquely() -> None:
    ref = mlp()
    model = conveyor.compile(copy.deepcopy(ref))
    x = torch.randn(3, 4)
    ref(x).pow(2).sum().backward()
    with cca.enable(stages={"compiled_autograd": {"inline": False}}) as session:
        model(x).pow(2).sum().backward()
    assert session.last is not None and session.last.inlined == 0 and session.last.opaque
    assert_same_grads(ref.parameters(), model.parameters())
