"""Custom autograd Functions and custom ops in compiled programs (issue 20),
both entry points and both backends, against eager: values and gradients,
with backwards that are deliberately not the derivative of the forward, so
only the program's own backward gives eager's gradients.

- ``torch.library.custom_op`` with ``register_autograd``/``register_fake``
  compiles as one node everywhere (core Note [Custom ops]).
- A ``torch.autograd.Function`` compiles as one ``conveyor::apply_function``
  node under ``conveyor.compile`` (core Note [Custom autograd functions]);
  behind dynamo the graph that applies it still runs eagerly, with a warning.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any

import conveyor
import pytest
import torch
from conveyor.testing import check

sys.path.insert(0, str(Path(__file__).parent))
from zoo_harness import (  # noqa: E402
    ALL_ENTRY_POINTS,
    conveyor_eager,
    conveyor_triton,
    entry_id,
    fresh_dynamo,  # noqa: E402,F401  (autouse)
)


@torch.library.custom_op("conveyor_tests::scaled_gelu", mutates_args=())
def scaled_gelu(x: torch.Tensor, scale: float) -> torch.Tensor:
    return x * torch.sigmoid(1.702 * x) * scale


@scaled_gelu.register_fake
def _(x: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.empty_like(x)


def _setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    ctx.save_for_backward(inputs[0])
    ctx.scale = inputs[1]


def _backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
    (x,) = ctx.saved_tensors
    return grad * x.sign() * ctx.scale, None  # not the derivative


scaled_gelu.register_autograd(_backward, setup_context=_setup)


class StraightThrough(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor, k: float) -> torch.Tensor:
        ctx.save_for_backward(w)
        ctx.k = k
        return (x * w).round()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        (w,) = ctx.saved_tensors
        return grad * w * ctx.k, grad.sum(0), None


class TwoOutputs(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x.exp(), x.cos()

    @staticmethod
    def backward(ctx: Any, ga: torch.Tensor, gb: torch.Tensor) -> torch.Tensor:
        return ga * 2 + gb


def _with_custom_op(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return scaled_gelu(x @ w, 0.5).sum(0)


def _with_function(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    a, b = TwoOutputs.apply(x.sin())
    return StraightThrough.apply(a + b, w[0], 3.0).sum(1)


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(4, 3, requires_grad=True), torch.randn(3, 3, requires_grad=True)


@pytest.mark.parametrize("compile", ALL_ENTRY_POINTS, ids=entry_id)
def test_a_custom_op_with_its_autograd_compiles(compile: Any) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        check(_with_custom_op, *_inputs(), compile=compile)


@pytest.mark.parametrize("compile", ALL_ENTRY_POINTS, ids=entry_id)
def test_custom_autograd_functions_keep_their_backward(compile: Any) -> None:
    standalone = compile in (conveyor_eager, conveyor_triton)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = compile(_with_function)
        check(_with_function, *_inputs(), compile=lambda fn: compiled)
    eager = [str(w.message) for w in caught if "eagerly" in str(w.message)]
    assert not eager if standalone else eager, eager
    if standalone:
        graphs = conveyor.last_graphs(compiled)
        assert graphs[0].graph.code.count("conveyor.apply_function") == 2


def test_a_custom_function_compiles_in_inference_too() -> None:
    compiled = conveyor.compile(_with_function)
    x, w = (t.detach() for t in _inputs())
    torch.testing.assert_close(compiled(x, w), _with_function(x, w))


def test_a_program_with_a_custom_function_is_not_stored_on_disk(tmp_path: Path) -> None:
    compiled = conveyor.compile(_with_function, cache=True, cache_dir=str(tmp_path))
    check(_with_function, *_inputs(), compile=lambda fn: compiled)
    assert not list(tmp_path.rglob("*.program"))
