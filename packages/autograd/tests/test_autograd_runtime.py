"""The run-time plan (Note [Run-time plan] in ``conveyor_autograd/runtime.py``):
what is precomputed per program gives what the per-call code gave."""

from __future__ import annotations

import conveyor
import torch
import torch._dynamo
from conveyor_autograd import AutogradLayout, InputIdx, OutputIdx, function_grads
from conveyor_autograd.runtime import CompiledFunction, _Backward, _direct_apply


def test_backward_gather_matches_input_grads() -> None:
    layout = AutogradLayout(
        num_inputs=5,
        num_outputs=1,
        grad_inputs=(InputIdx(3), InputIdx(0), InputIdx(4)),
        diff_outputs=(OutputIdx(0),),
        non_differentiable=(),
        num_saved_tensors=0,
        num_saved_symbols=0,
    )
    grads = ["g3", "g0", "g4"]
    assert _Backward.of(layout, lambda args: args).function_grads(grads) == function_grads(layout.input_grads(grads))


def test_direct_apply_is_probed() -> None:
    assert _direct_apply(CompiledFunction) is not None  # the installed torch's Function.apply is laid out as probed

    class WithSetup(CompiledFunction):
        @staticmethod
        def setup_context(ctx, inputs, output):  # type: ignore[no-untyped-def,override]
            pass

    assert _direct_apply(WithSetup) is None  # Function.apply binds its arguments: torch's path


def test_int_inputs_and_views_through_the_plan() -> None:
    """A symbolic int among the inputs (torch's own ``apply``) and an output
    that views an intermediate (left as a non-view), both trained."""
    torch._dynamo.reset()

    def f(x, w):
        y = (x @ w) + 1  # nothing saves y: changing its view in place is allowed
        return y.t(), y.sum()

    compiled = torch.compile(f, backend="conveyor", dynamic=True)
    for n in (4, 6):
        x, w = torch.randn(n, 3, requires_grad=True), torch.randn(3, 5, requires_grad=True)
        a, s = compiled(x, w)
        a.mul_(2)  # eager allows changing a view of an intermediate in place
        (a.sum() + s).backward()
        x2, w2 = x.detach().requires_grad_(), w.detach().requires_grad_()
        ea, es = f(x2, w2)
        ea.mul_(2)
        (ea.sum() + es).backward()
        torch.testing.assert_close((x.grad, w.grad), (x2.grad, w2.grad))
    assert [g.label for g in conveyor.last_graphs(compiled) if g.stage == "autograd" and not g.step] == [
        "forward",
        "backward",
    ]
