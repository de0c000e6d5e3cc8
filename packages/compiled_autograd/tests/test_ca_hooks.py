"""Hooks, foreign autograd.Functions, checkpoint, queued callbacks, create_graph: as in eager."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import Callable
from typing import Any

import conveyor_compiled_autograd as cca
import pytest
import torch
from ca_helpers import assert_same_grads, mlp
from torch import nn
from torch.utils.checkpoint import checkpoint


def _both(run: Callable[[Any], Any]) -> tuple[Any, Any, cca.Session]:
    """``run(ctx)`` eagerly and under compiled autograd; both results and the session."""
    eager = run(contextlib.nullcontext)
    sessions: list[cca.Session] = []

    @contextlib.contextmanager
    def compiled() -> Any:
        with cca.enable() as session:
            sessions.append(session)
            yield

    return eager, run(compiled), sessions[-1]


def _hooked_steps(ctx: Any) -> tuple[list[Any], nn.Module, torch.Tensor]:
    """Every hook kind on a small model, two steps; the log of hook calls
    (kind and the value each saw), the model and the input."""
    model = mlp()
    log: list[Any] = []
    model[0].register_full_backward_hook(
        lambda m, gi, go: log.append(("module", go[0].sum().item(), gi[0].sum().item()))
    )
    model[2].register_full_backward_pre_hook(lambda m, go: log.append(("module_pre", go[0].sum().item())))
    model[0].weight.register_post_accumulate_grad_hook(lambda p: log.append(("post_acc", p.grad.sum().item())))
    model[2].bias.register_hook(lambda g: log.append(("leaf", g.sum().item())))
    x = torch.randn(3, 4, requires_grad=True)

    def scale(g: torch.Tensor) -> torch.Tensor:
        log.append(("tensor", g.sum().item()))
        return g * 2

    with ctx():
        for _ in range(2):
            h = model[0](x)
            h.register_hook(scale)  # changes the gradient that flows on
            y = model[2](model[1](h))
            y.grad_fn.register_prehook(lambda gs: log.append(("grad_fn_pre", gs[0].sum().item())))
            y.grad_fn.register_hook(lambda gi, go: log.append(("grad_fn_post", go[0].sum().item())))
            with torch.autograd.graph.saved_tensors_hooks(
                lambda t: (log.append("pack"), t)[1], lambda t: (log.append("unpack"), t)[1]
            ):
                z = y.sin().sum()
            z.backward()
    return log, model, x


def test_every_hook_runs_once_with_eager_values() -> None:
    (log_e, model_e, x_e), (log_c, model_c, x_c), session = _both(_hooked_steps)
    assert [e[0] if isinstance(e, tuple) else e for e in log_c] == [e[0] if isinstance(e, tuple) else e for e in log_e]
    for e, c in zip(log_e, log_c, strict=True):
        if isinstance(e, tuple):
            assert c[1:] == pytest.approx(e[1:], rel=1e-5, abs=1e-6), (e, c)
    assert_same_grads(model_e.parameters(), model_c.parameters())
    torch.testing.assert_close(x_c.grad, x_e.grad)
    kinds = set(session.last.opaque)
    assert {"tensor_pre_hook", "post_acc_grad_hook", "unpack_hook"} <= kinds
    # module full backward hooks run through torch's BackwardHookFunction, a Python Function: opaque
    assert any("BackwardHookFunction" in k for k in kinds)


def test_hooks_are_run_time_inputs_not_baked_in() -> None:
    """A new hook object with the same structure reuses the capture and runs the new body."""
    model = mlp()
    seen: list[str] = []
    with cca.enable() as session:
        for name in ("first", "second", "third"):
            y = model(torch.randn(3, 4))
            y.register_hook(lambda g, name=name: seen.append(name))
            y.sum().backward()
    assert seen == ["first", "second", "third"]
    assert session.captures <= 2


class Boom(ValueError):
    pass


def test_hook_exception_keeps_its_type() -> None:
    model = mlp()
    y = model(torch.randn(3, 4))

    def hook(g: torch.Tensor) -> None:
        raise Boom("from a hook")

    y.register_hook(hook)
    with cca.enable():
        with pytest.raises(Boom, match="from a hook"):
            y.sum().backward()


class Cube(torch.autograd.Function):
    """A foreign Function: its backward runs in Python, opaque."""

    calls = 0

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x**3

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        Cube.calls += 1
        (x,) = ctx.saved_tensors
        return 3 * x * x * g


def test_foreign_autograd_function_stays_opaque() -> None:
    def run(ctx: Any) -> tuple[nn.Module, int]:
        model = mlp()
        before = Cube.calls
        with ctx():
            for _ in range(2):
                Cube.apply(model(torch.ones(3, 4))).sum().backward()
        return model, Cube.calls - before

    (model_e, calls_e), (model_c, calls_c), session = _both(run)
    assert calls_c == calls_e == 2
    assert_same_grads(model_e.parameters(), model_c.parameters())
    assert session.last.opaque == (f"call_backward({__name__}.Cube)",)


@pytest.mark.parametrize("reentrant", [False, True])
def test_checkpoint(reentrant: bool) -> None:
    def run(ctx: Any) -> tuple[nn.Module, torch.Tensor]:
        model = mlp()
        x = torch.ones(3, 4, requires_grad=True)
        with ctx():
            checkpoint(model, x, use_reentrant=reentrant).pow(2).sum().backward()
        return model, x

    (model_e, x_e), (model_c, x_c), session = _both(run)
    assert_same_grads(model_e.parameters(), model_c.parameters())
    torch.testing.assert_close(x_c.grad, x_e.grad)
    assert session.captures == 1


def test_queued_callbacks_run_once_after_the_backward() -> None:
    """Note [Queued callbacks]: torch's engine drops them under compiled autograd; we run them."""

    def run(ctx: Any) -> list[str]:
        model = mlp()
        events: list[str] = []

        def hook(g: torch.Tensor) -> None:
            events.append("hook")
            engine = torch.autograd.Variable._execution_engine
            engine.queue_callback(lambda: events.append("callback"))

        def post_acc(p: torch.Tensor) -> None:
            events.append("post_acc")

        model[0].weight.register_post_accumulate_grad_hook(post_acc)
        with ctx():
            for _ in range(2):
                y = model(torch.ones(2, 4))
                y.register_hook(hook)
                y.sum().backward()
                events.append("returned")
        return events

    eager, compiled, _ = _both(run)
    assert compiled == eager
    assert eager.count("callback") == 2


def test_create_graph_plain_model_matches_eager() -> None:
    def run(ctx: Any) -> nn.Module:
        model = mlp(d_out=1)
        x = torch.ones(3, 4)
        with ctx():
            grads = torch.autograd.grad(model(x).sum(), list(model.parameters()), create_graph=True)
            sum(g.pow(2).sum() for g in grads).backward()
        return model

    eager, compiled, _ = _both(run)
    assert_same_grads(eager.parameters(), compiled.parameters())


def test_create_graph_through_inlined_conveyor_backward_is_a_clear_error() -> None:
    import conveyor

    model = conveyor.compile(mlp())
    with cca.enable():
        loss = model(torch.ones(3, 4)).sum()
        with pytest.raises(RuntimeError, match="higher-order gradients"):
            torch.autograd.grad(loss, list(model.parameters()), create_graph=True)


def test_hook_sees_eager_gradient_for_a_leaf_input() -> None:
    ref = mlp()
    model = copy.deepcopy(ref)
    x = torch.ones(2, 4, requires_grad=True)
    seen: list[torch.Tensor] = []
    x.register_hook(lambda g: seen.append(g.clone()))
    ref(x).sum().backward()
    with cca.enable():
        model(x).sum().backward()
    assert len(seen) == 2
    torch.testing.assert_close(seen[1], seen[0])


def test_queued_callbacks_of_another_thread_stay_with_its_own_backward() -> None:
    """Note [Queued callbacks]: a captured backward and an eager backward in
    another thread run at the same time, each queueing a callback while the
    other is inside its backward: each callback runs at the end of its own
    thread's backward."""
    import threading

    events: list[str] = []
    a_inside, b_inside, a_queued, b_done = (threading.Event() for _ in range(4))

    def b_hook(g: torch.Tensor) -> None:
        b_inside.set()
        a_queued.wait(timeout=30)
        torch.autograd.Variable._execution_engine.queue_callback(lambda: events.append("eager callback"))

    def eager_backward_in_other_thread() -> None:
        a_inside.wait(timeout=30)
        y = torch.ones(3, requires_grad=True) * 2
        y.register_hook(b_hook)
        y.sum().backward()
        events.append("eager returned")
        b_done.set()

    def a_hook(g: torch.Tensor) -> None:
        a_inside.set()
        b_inside.wait(timeout=30)
        torch.autograd.Variable._execution_engine.queue_callback(lambda: events.append("captured callback"))
        a_queued.set()
        b_done.wait(timeout=30)

    other = threading.Thread(target=eager_backward_in_other_thread)
    other.start()
    model = mlp()
    with cca.enable():
        y = model(torch.ones(2, 4))
        y.register_hook(a_hook)
        y.sum().backward()
        events.append("captured returned")
    other.join(timeout=30)
    assert events == ["eager callback", "eager returned", "captured callback", "captured returned"]
