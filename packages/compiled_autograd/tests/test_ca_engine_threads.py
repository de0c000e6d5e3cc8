"""Note [Queued callbacks]: the engine stand-in of a captured backward leaves
every other thread's backward as it is in eager (issue 21: no process-wide
change of torch's behaviour)."""

from __future__ import annotations

import threading
from typing import Any

import conveyor_compiled_autograd as cca
import torch
from ca_helpers import mlp


def _plain_backward(events: list[str]) -> None:
    """A backward whose hook queues a callback that queues another, and
    which asks whether checkpointing is valid: eager's own behaviour is the
    log of what ran, in order."""
    engine = torch.autograd.Variable._execution_engine
    events.append(f"engine is torch's class: {isinstance(engine, torch._C._ImperativeEngine)}")

    def second() -> None:
        events.append("second callback")

    def first() -> None:
        events.append("first callback")
        torch.autograd.Variable._execution_engine.queue_callback(second)

    def hook(g: torch.Tensor) -> None:
        events.append(f"hook, checkpoint valid: {torch.autograd._is_checkpoint_valid()}")
        torch.autograd.Variable._execution_engine.queue_callback(first)

    x = torch.ones(3, requires_grad=True)
    y = x * 2
    y.register_hook(hook)
    y.sum().backward()
    events.append(f"returned, grad {x.grad.tolist()}")


def test_a_plain_backward_in_another_thread_runs_as_in_eager_during_a_captured_one() -> None:
    alone: list[str] = []
    _plain_backward(alone)

    beside: list[Any] = []
    inside, done = threading.Event(), threading.Event()

    def other_thread() -> None:
        inside.wait(30)
        try:
            _plain_backward(beside)
        except BaseException as exc:  # asserted below
            beside.append(exc)
        done.set()

    def captured_hook(g: torch.Tensor) -> None:
        inside.set()
        done.wait(30)  # the other thread's whole backward runs now

    worker = threading.Thread(target=other_thread)
    worker.start()
    model = mlp()
    with cca.enable() as session:
        y = model(torch.ones(2, 4))
        y.register_hook(captured_hook)
        y.sum().backward()
    worker.join(30)
    assert session.captures == 1
    assert done.is_set()
    assert beside == alone
    assert alone[0] == "engine is torch's class: True"
    assert alone[-3:] == ["first callback", "second callback", "returned, grad [2.0, 2.0, 2.0]"]


def test_the_engine_is_torch_own_object_again_after_a_captured_backward() -> None:
    engine = torch.autograd.Variable._execution_engine
    seen: list[Any] = []
    model = mlp()
    with cca.enable():
        y = model(torch.ones(2, 4))
        y.register_hook(lambda g: seen.append(torch.autograd.Variable._execution_engine))
        y.sum().backward()
    assert torch.autograd.Variable._execution_engine is engine
    assert len(seen) == 1 and seen[0] is not engine and isinstance(seen[0], torch._C._ImperativeEngine)
