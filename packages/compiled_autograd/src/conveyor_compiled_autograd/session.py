"""The user-facing context manager: ``enable(**options)`` and its ``Session``."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
from conveyor import Pipeline, Plugins, StageGraph, resolve
from torch._dynamo import compiled_autograd as ca

from conveyor_compiled_autograd.capture import ConveyorCapture, inline_supported
from conveyor_compiled_autograd.names import OPTIONS
from conveyor_compiled_autograd.program import STAGE
from conveyor_compiled_autograd.runtime import CompiledBackward


@dataclass(frozen=True)
class Capture:
    """One backward graph captured (and compiled) inside a session.

    :ivar index: 0 for the session's first capture, 1 for the next, ...
    :ivar inlined: conveyor backward graphs copied into it (Note [Inlined backward]).
    :ivar opaque: what stayed opaque, in graph order: user hooks (by hook
        kind), foreign ``autograd.Function`` backwards (``call_backward(<class>)``)
        and calls torch added that conveyor does not compile. Gradient
        accumulation and the final-callbacks stub are not listed.
    :ivar backward: the run-time callable torch's engine calls.
    """

    index: int
    inlined: int
    opaque: tuple[str, ...]
    backward: CompiledBackward

    @property
    def graphs(self) -> tuple[StageGraph, ...]:
        """The captured graph, then the graph after each stage of each
        compiled segment (filled on the capture's first run)."""
        return self.backward.graphs

    @property
    def compiles(self) -> int:
        """How many times conveyor compiled a segment of this capture."""
        return self.backward.compiles


class Session:
    """What ``enable()`` yields: the captures made inside the context."""

    def __init__(self, pipeline: Pipeline, inline: bool) -> None:
        self.pipeline = pipeline
        self.inline = inline
        self._captures: list[Capture] = []

    @property
    def captures(self) -> int:
        """How many backward graphs were captured (and compiled) so far."""
        return len(self._captures)

    @property
    def last(self) -> Capture | None:
        """The most recent capture, or ``None``."""
        return self._captures[-1] if self._captures else None

    @property
    def history(self) -> tuple[Capture, ...]:
        """Every capture, oldest first."""
        return tuple(self._captures)

    def _compile_capture(self, gm: torch.fx.GraphModule, inlined: int, functions: tuple[str, ...]) -> CompiledBackward:
        index = len(self._captures)
        backward = CompiledBackward(gm, self.pipeline, inlined, f"captured backward {index}")
        self._captures.append(Capture(index, inlined, _opaque(backward, functions), backward))
        return backward


def _opaque(backward: CompiledBackward, functions: tuple[str, ...]) -> tuple[str, ...]:
    names: list[str] = []
    fn = iter(functions)
    for node in backward.plan.opaque:
        target = getattr(node.target, "__name__", str(node.target))
        if target in ("call_accumulate_grad", "_exec_final_callbacks_stub"):
            continue
        if target == "call_hook":
            names.append(str(node.kwargs.get("hook_type", "hook")))
        elif target == "call_backward":
            names.append(next(fn, "call_backward"))
        else:
            names.append(target)
    return tuple(names)


@contextmanager
def enable(*, plugins: Plugins | None = None, **options: Any) -> Iterator[Session]:
    """Capture every backward run inside the context into one graph, and
    compile it with conveyor's pipeline.

    :param options: the configuration keys of ``conveyor.compile``
        (``backend``, ``enable``, ``disable``, ``stages``, ...), checked here:
        an unknown key, stage or option raises ``conveyor.ConfigError`` that
        lists the valid ones. This package's own options (:data:`OPTIONS`)
        are the table ``stages={"compiled_autograd": {...}}``, or
        ``[tool.conveyor.stages.compiled_autograd]`` in ``pyproject.toml``.
    :param plugins: a plugin manager to use instead of discovering one (tests).
    :return: a :class:`Session` (``captures``, ``last``).

    On exit, normal or by an exception, torch's compiled-autograd state (the
    installed compiler, its ``compiled_autograd_enabled`` flag) is what it
    was before, and the engine's capture cache is cleared so that no graph
    compiled here runs outside the context. Autograd runs single-threaded
    inside (as with torch's own compiled autograd).
    """
    pipeline = Pipeline(resolve(options), plugins)  # fails here, with the valid choices
    own = pipeline.tool_options.get(STAGE, OPTIONS)  # the defaults, where plugins lack this package
    inline = bool(own["inline"]) and inline_supported()
    session = Session(pipeline, inline)
    engine = torch._C._dynamo.compiled_autograd
    factory = functools.partial(ConveyorCapture, session._compile_capture, inline)
    engine.clear_cache()  # a graph captured before (by torch or another session) must not stand in for ours
    prior = engine.set_autograd_compiler(factory, True)
    prior_flag = ca.compiled_autograd_enabled
    ca.compiled_autograd_enabled = True
    try:
        with torch.autograd.set_multithreading_enabled(False):
            yield session
    finally:
        engine.set_autograd_compiler(*prior)
        ca.compiled_autograd_enabled = prior_flag
        engine.clear_cache()
