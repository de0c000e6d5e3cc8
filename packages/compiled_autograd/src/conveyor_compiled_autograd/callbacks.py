"""Note [Queued callbacks]: ``Variable._execution_engine.queue_callback(cb)``
asks the engine to run ``cb`` when the current backward has finished (FSDP
and user code do). Under compiled autograd torch's engine keeps them on the
graph task but never runs them: the capture ends with a stub that only
dynamo knows how to replace, so without dynamo they are dropped (verified
with torch 2.13).

While any thread runs a captured backward, a stand-in sits in front of the
engine object that ``torch.autograd`` reaches through
``Variable._execution_engine`` (installed by the first such run, removed by
the last: counted under a lock). The stand-in forwards everything to the
real engine, except ``queue_callback`` made by a thread that is running a
captured backward (its :class:`Collector`, kept per thread): that callback
is kept and run at the stub, in order, with callbacks queued by callbacks
run too, as the engine does. A call from any other thread, and every call
made during a backward nested in the captured one (a reentrant checkpoint, a
hook that calls ``torch.autograd.grad``), goes to the real engine untouched,
so the swap changes nothing for code that is not ours. The stand-in is an
instance of the engine's own class (``torch._C._ImperativeEngine``, whose
methods all reach torch's one engine), so a thread that looks at the engine
(``isinstance``, dynamo tracing a ``queue_callback``) finds what it would
find without us.

Why a swap at all: torch offers no per-thread way in. Under compiled
autograd the real engine appends ``queue_callback``'s callback to the
running graph task's C++ ``final_callbacks_``, which no Python API reads or
runs, and ``Variable._execution_engine`` is read from the class by every
caller (torch's own ``queue_callback`` users included) at the moment of the
call (checked with torch 2.13 and 2.14.1).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch


class Collector:
    """The callbacks queued by one captured backward's own thread."""

    def __init__(self) -> None:
        self.pending: list[Callable[[], Any]] = []
        self.nested = 0  # backwards run inside this one: theirs go to the engine

    def run_pending(self) -> None:
        """Run the queued callbacks, and those they queue, in order."""
        while self.pending:
            self.pending.pop(0)()


class _Engine(torch._C._ImperativeEngine):
    """The engine, with ``queue_callback`` of a captured backward's thread
    kept aside; everything else goes to ``engine`` (torch's, or whatever
    stood there before us)."""

    def __init__(self, engine: Any) -> None:
        super().__init__()
        self._engine = engine

    def is_checkpoint_valid(self) -> bool:
        return bool(self._engine.is_checkpoint_valid())

    def queue_callback(self, callback: Callable[[], Any]) -> None:
        collector = getattr(_local, "collector", None)
        if collector is None or collector.nested:
            self._engine.queue_callback(callback)
        else:
            collector.pending.append(callback)

    def run_backward(self, *args: Any, **kwargs: Any) -> Any:
        collector = getattr(_local, "collector", None)
        if collector is None:
            return self._engine.run_backward(*args, **kwargs)
        collector.nested += 1
        try:
            return self._engine.run_backward(*args, **kwargs)
        finally:
            collector.nested -= 1

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)


_local = threading.local()
_lock = threading.Lock()
_installed: list[Any] = [None, 0]  # the real engine while the stand-in is installed, and how many runs hold it


@contextmanager
def collecting() -> Iterator[Collector]:
    """This thread's collector for one captured backward's run (see the module docstring)."""
    variable = torch.autograd.Variable
    with _lock:
        if _installed[1] == 0:
            _installed[0] = variable._execution_engine
            variable._execution_engine = _Engine(_installed[0])  # type: ignore[assignment]
        _installed[1] += 1
    outer = getattr(_local, "collector", None)
    collector = _local.collector = Collector()
    try:
        yield collector
    finally:
        _local.collector = outer
        with _lock:
            _installed[1] -= 1
            if _installed[1] == 0:
                variable._execution_engine = _installed[0]  # type: ignore[assignment]
                _installed[0] = None
