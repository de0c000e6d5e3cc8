"""A custom Function applied in a program compiled by ``conveyor.compile``
runs its forward once per call and its backward once per backward, in
Python, with the ``ctx`` of that call (core Note [A Function's backward at
run time]): side effects, Python branches on gradient values, ``ctx``
attributes, ``needs_input_grad``, ``set_materialize_grads(False)``, as eager."""

from __future__ import annotations

import gc
import sys
import warnings
from pathlib import Path
from typing import Any

import conveyor
import pytest
import torch
from conveyor.frontend import function_records
from conveyor.testing import check
from torch.autograd.function import once_differentiable

sys.path.insert(0, str(Path(__file__).parent))
from zoo_harness import fresh_dynamo  # noqa: E402,F401  (autouse)

LOG: list[Any] = []


class Logged(torch.autograd.Function):
    """Logs each forward and backward; branches on the gradient's sign."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor, k: float) -> torch.Tensor:
        LOG.append("forward")
        ctx.save_for_backward(w)
        ctx.k = k * 2  # an attribute the backward reads
        return (x * w).round()

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor | None, torch.Tensor | None, None]:
        LOG.append(("backward", ctx.needs_input_grad, ctx.k))
        (w,) = ctx.saved_tensors
        if g.sum() > 0:  # a Python branch on a gradient's value
            gx = g * w * ctx.k
        else:
            gx = -g
        return gx if ctx.needs_input_grad[0] else None, g.sum(0) if ctx.needs_input_grad[1] else None, None


def _logged(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return Logged.apply(x.sin(), w, 1.5).sum(1)


def _run(fn: Any, calls: int, w_grad: bool = True) -> tuple[list[Any], list[Any]]:
    """``calls`` forward+backward passes of ``fn``, the gradient's sign
    flipping on the second: the log and the gradients."""
    LOG.clear()
    torch.manual_seed(0)
    grads = []
    for i in range(calls):
        x, w = torch.randn(4, 3, requires_grad=True), torch.randn(3, requires_grad=w_grad)
        (fn(x, w) * (-1 if i == 1 else 1)).sum().backward()
        grads.append((x.grad, w.grad))
    return list(LOG), grads


def _compiled_run(fn: Any, calls: int, **kwargs: Any) -> tuple[list[Any], list[Any]]:
    compiled = conveyor.compile(fn)
    x, w = torch.randn(4, 3, requires_grad=True), torch.randn(3, requires_grad=kwargs.get("w_grad", True))
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no eager fallback
        compiled(x, w)  # compiles (the forward runs on fake tensors then)
        return _run(compiled, calls, **kwargs)


@pytest.mark.parametrize("w_grad", [True, False])
def test_backward_side_effects_happen_once_per_backward_as_in_eager(w_grad: bool) -> None:
    eager_log, eager_grads = _run(_logged, 3, w_grad=w_grad)
    log, grads = _compiled_run(_logged, 3, w_grad=w_grad)
    assert log == eager_log  # forwards and backwards, in order, with needs_input_grad and ctx.k
    assert sum(1 for e in log if e != "forward") == 3
    for (ex, ew), (cx, cw) in zip(eager_grads, grads, strict=True):
        torch.testing.assert_close(cx, ex)
        assert (cw is None) == (ew is None)
        if ew is not None:
            torch.testing.assert_close(cw, ew)


def test_a_global_flag_read_in_backward_is_read_at_each_backward() -> None:
    flag = {"scale": 1.0}

    class Scaled(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            return x * 2

        @staticmethod
        def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
            return g * flag["scale"]

    def fn(x: torch.Tensor) -> torch.Tensor:
        return Scaled.apply(x.cos())

    compiled = conveyor.compile(fn)
    compiled(torch.randn(3, requires_grad=True))  # compiles
    for scale in (1.0, 5.0, -2.0):
        flag["scale"] = scale
        x = torch.randn(3, requires_grad=True)
        xc = x.detach().clone().requires_grad_()
        fn(x).sum().backward()
        compiled(xc).sum().backward()
        torch.testing.assert_close(xc.grad, x.grad)


def test_a_function_applied_twice_runs_each_backward() -> None:
    def fn(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return Logged.apply(Logged.apply(x, w, 1.0), w, 2.0).sum(1)

    eager_log, eager_grads = _run(fn, 3)
    log, grads = _compiled_run(fn, 3)
    assert log == eager_log
    assert sum(1 for e in log if e != "forward") == 6
    for e, c in zip(eager_grads, grads, strict=True):
        torch.testing.assert_close(c, e)


class _NotMaterialized(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ctx.set_materialize_grads(False)
        return x.exp(), x.cos()

    @staticmethod
    def backward(ctx: Any, ga: torch.Tensor | None, gb: torch.Tensor | None) -> torch.Tensor:
        LOG.append(("grads", ga is None, gb is None))
        out = torch.zeros(())
        if ga is not None:
            out = out + ga * 2
        if gb is not None:
            out = out + gb * 3
        return out


def _first_of_two(x: torch.Tensor) -> torch.Tensor:
    a, _ = _NotMaterialized.apply(x * 1)
    return a.sum()


def test_set_materialize_grads_false_gives_none_for_an_unused_output() -> None:
    LOG.clear()
    check(_first_of_two, torch.randn(3, requires_grad=True))
    assert LOG == [("grads", False, True)] * 2  # eager's, then the compiled program's


class _OnceDifferentiable(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        out = x.exp()
        ctx.save_for_backward(out)  # an output saved for backward
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        (out,) = ctx.saved_tensors
        return g * out * 2  # not the derivative


def test_once_differentiable_and_a_saved_output() -> None:
    check(lambda x: _OnceDifferentiable.apply(x.sin()).tanh(), torch.randn(5, requires_grad=True))


class _ArgmaxMarked(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        idx = x.argmax(-1)
        scaled = x * 3
        ctx.mark_non_differentiable(idx)
        ctx.save_for_backward(idx)
        return scaled, idx

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor, _: Any) -> torch.Tensor:
        (idx,) = ctx.saved_tensors
        LOG.append(("idx", idx.tolist()))  # not traceable: a real tensor's values
        return g * 5


def test_mark_non_differentiable_with_non_traceable_code_in_backward() -> None:
    LOG.clear()
    x = torch.randn(2, 4, requires_grad=True)
    check(lambda t: _ArgmaxMarked.apply(t)[0].sum(), x)
    assert len(LOG) == 2 and LOG[0] == LOG[1] == ("idx", x.argmax(-1).tolist())


def test_the_kept_applications_are_freed() -> None:
    compiled = conveyor.compile(_logged)
    x, w = torch.randn(4, 3, requires_grad=True), torch.randn(3, requires_grad=True)
    gc.collect()
    before = function_records.live_records()
    out = compiled(x, w)
    assert function_records.live_records() == before + 1
    out.sum().backward()
    gc.collect()
    assert function_records.live_records() == before  # freed with the program's saved values
    out = compiled(x, w)
    del out  # no backward: freed with the forward's result
    gc.collect()
    assert function_records.live_records() == before


def test_retain_graph_runs_the_backward_each_time() -> None:
    compiled = conveyor.compile(_logged)
    x, w = torch.randn(4, 3, requires_grad=True), torch.randn(3, requires_grad=True)
    out = compiled(x, w).sum()
    LOG.clear()
    out.backward(retain_graph=True)
    out.backward()
    assert [e[0] for e in LOG] == ["backward", "backward"]
    xe, we = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    oe = _logged(xe, we).sum()
    oe.backward(retain_graph=True)
    oe.backward()
    torch.testing.assert_close(x.grad, xe.grad)
    torch.testing.assert_close(w.grad, we.grad)


class _Square(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x * x

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return 2 * x * g  # differentiable: eager supports double backward


def test_double_backward_is_a_clear_error() -> None:
    compiled = conveyor.compile(lambda x: _Square.apply(x.sin()).sum())
    x = torch.randn(3, requires_grad=True)
    (g,) = torch.autograd.grad(compiled(x), x, create_graph=True)
    with pytest.raises(RuntimeError, match="double backward through a compiled program is not supported"):
        g.sum().backward()


@pytest.mark.parametrize("backend", ["eager", "triton", "inductor"])
def test_backends_run_the_backward_op(backend: str) -> None:
    if backend == "inductor":
        pytest.importorskip("conveyor_inductor")
    compiled = conveyor.compile(_logged, backend=backend)
    eager_log, eager_grads = _run(_logged, 2)
    x, w = torch.randn(4, 3, requires_grad=True), torch.randn(3, requires_grad=True)
    compiled(x, w)
    log, grads = _run(compiled, 2)
    assert log == eager_log
    for e, c in zip(eager_grads, grads, strict=True):
        torch.testing.assert_close(c, e)


def test_a_saved_tensor_hook_that_copies_the_token_applies_the_function_again_with_a_warning() -> None:
    compiled = conveyor.compile(_logged)
    x, w = torch.randn(4, 3, requires_grad=True), torch.randn(3, requires_grad=True)
    compiled(x, w)
    xe, we = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    with torch.autograd.graph.saved_tensors_hooks(lambda t: t.clone(), lambda t: t):
        out = compiled(x, w)
        _logged(xe, we).sum().backward()
    with pytest.warns(UserWarning, match="runs again before its backward"):
        out.sum().backward()
    torch.testing.assert_close(x.grad, xe.grad)
    torch.testing.assert_close(w.grad, we.grad)
