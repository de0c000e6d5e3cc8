"""``conveyor.analysis.functional_run.wrap_inputs`` wraps as torch's
``FunctionalTensor.to_functional`` does (Note [Wrapping inputs below the
functional mode]), fact by fact, on fake and real inputs, inside a trace and
out, with static and symbolic sizes."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from conveyor.analysis import functional_run
from conveyor.analysis.functional_run import wrap_inputs
from torch._subclasses.fake_tensor import FakeTensorMode
from torch._subclasses.functional_tensor import FunctionalTensor, FunctionalTensorMode
from torch.fx.experimental.proxy_tensor import make_fx
from torch.fx.experimental.symbolic_shapes import ShapeEnv


def _inputs() -> list[Any]:
    leaf = torch.randn(4, 6, requires_grad=True)
    return [
        leaf,
        leaf * 2,  # a non-leaf
        leaf[1:, ::2],  # a view of a leaf
        torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last),
        torch.zeros(3, dtype=torch.int64),
        7,
        None,
    ]


def _facts(t: Any) -> Any:
    if not isinstance(t, torch.Tensor):
        return t
    return (
        type(t),
        t.requires_grad,
        t.is_leaf,
        t.grad_fn is None,
        t.shape,
        t.stride(),
        t.storage_offset(),
        t.dtype,
        t.device,
        torch._is_functional_tensor(t.elem),
    )


def _both(inputs: list[Any]) -> tuple[list[Any], list[Any], list[Any]]:
    """(torch's facts, ours, and whether each of ours wraps its input)"""
    with FunctionalTensorMode() as mode:
        theirs = [FunctionalTensor.to_functional(v) if isinstance(v, torch.Tensor) else v for v in inputs]
        ours = wrap_inputs(inputs, mode)
        wraps = [
            not isinstance(v, torch.Tensor) or torch._from_functional_tensor(w.elem) is v for v, w in zip(inputs, ours)
        ]
        return [_facts(t) for t in theirs], [_facts(t) for t in ours], wraps


def test_real_inputs_are_wrapped_as_torch_wraps_them() -> None:
    theirs, ours, wraps = _both(_inputs())
    assert ours == theirs
    assert all(wraps)


@pytest.mark.parametrize("symbolic", [False, True])
def test_fake_inputs_are_wrapped_as_torch_wraps_them(symbolic: bool) -> None:
    mode = FakeTensorMode(shape_env=ShapeEnv()) if symbolic else FakeTensorMode()
    fakes = [mode.from_tensor(v, static_shapes=not symbolic) if isinstance(v, torch.Tensor) else v for v in _inputs()]
    if symbolic:
        assert any(isinstance(d, torch.SymInt) for d in fakes[0].shape)
    with mode:
        theirs, ours, wraps = _both(fakes)
    assert ours == theirs
    assert all(wraps)


def test_inside_a_trace_the_graph_is_the_same() -> None:
    """Under make_fx: the same graph, the same facts (the device query with
    the functional mode off records nothing)."""
    found: dict[str, Any] = {}

    def program(wrap: bool) -> Any:
        def f(x: torch.Tensor, y: torch.Tensor) -> Any:
            with FunctionalTensorMode() as mode:
                fx, fy = wrap_inputs([x, y], mode) if wrap else [FunctionalTensor.to_functional(v) for v in (x, y)]
                found[str(wrap)] = [_facts(fx), _facts(fy)]
                fx.add_(fy)
                out = fx.view(-1) * 2
                torch._sync(fx)
                return torch._from_functional_tensor(fx.elem), torch._from_functional_tensor(out.elem)

        return f

    mode = FakeTensorMode()
    x, y = mode.from_tensor(torch.randn(3, 4)), mode.from_tensor(torch.randn(3, 4))
    with mode:
        ours = make_fx(program(True))(x, y)
        theirs = make_fx(program(False))(x, y)
    assert ours.code == theirs.code
    assert found["True"] == found["False"]


def test_a_subclass_input_takes_torchs_wrap(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tensor subclass may answer its device otherwise: torch's wrap."""

    class Marked(torch.Tensor):
        pass

    calls: list[Any] = []
    monkeypatch.setattr(functional_run, "to_functional", lambda v: calls.append(v) or FunctionalTensor.to_functional(v))
    marked = torch.randn(3).as_subclass(Marked)
    with FunctionalTensorMode() as mode:
        wrap_inputs([torch.randn(2), marked], mode)
    assert len(calls) == 2


def test_an_input_already_functional_is_refused_as_torch_refuses_it() -> None:
    with FunctionalTensorMode() as mode:
        inner = torch._to_functional_tensor(torch.randn(2))
        with pytest.raises(AssertionError, match="already be a functional tensor"):
            wrap_inputs([inner], mode)
