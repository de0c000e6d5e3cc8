"""Note [Queued callbacks]: ``Variable._execution_engine.queue_callback(cb)``
asks the engine to run ``cb`` when the current backward has finished (FSDP
and user code do). Under compiled autograd torch's engine keeps them on the
graph task but never runs them: the capture ends with a stub that only
dynamo knows how to replace, so without dynamo they are dropped (verified
with torch 2.13).

While one captured backward runs, :func:`collecting` puts a stand-in in
front of the engine object that ``torch.autograd`` reaches through
``Variable._execution_engine``: ``queue_callback`` made during this backward
is kept here and run at the stub, in order, with callbacks queued by
callbacks run too, as the engine does. Everything else, and every call made
during a backward nested in this one (a reentrant checkpoint, a hook that
calls ``torch.autograd.grad``), goes to the real engine untouched. The
stand-in is put back in ``finally``; it is never installed outside a
captured backward's run.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch


class _Engine:
    """The engine, with this backward's ``queue_callback`` kept aside."""

    def __init__(self, engine: Any) -> None:
        self._engine = engine
        self.pending: list[Callable[[], Any]] = []
        self._nested = 0

    def queue_callback(self, callback: Callable[[], Any]) -> None:
        if self._nested:
            self._engine.queue_callback(callback)
        else:
            self.pending.append(callback)

    def run_backward(self, *args: Any, **kwargs: Any) -> Any:
        self._nested += 1
        try:
            return self._engine.run_backward(*args, **kwargs)
        finally:
            self._nested -= 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def run_pending(self) -> None:
        """Run the queued callbacks, and those they queue, in order."""
        while self.pending:
            self.pending.pop(0)()


@contextmanager
def collecting() -> Iterator[_Engine]:
    """The stand-in engine for one captured backward's run (see the module docstring)."""
    variable = torch.autograd.Variable
    real = variable._execution_engine
    stand_in = _Engine(real)
    variable._execution_engine = stand_in  # type: ignore[assignment]
    try:
        yield stand_in
    finally:
        variable._execution_engine = real
