"""The stage-facing lowering helpers: a stage's warned eager fallback."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx

from conveyor.analysis.grad_regions import call_graph
from conveyor.protocol.stage import CompiledFn, Lowering, Request


def warn_eager(what: str, reason: str) -> None:
    warnings.warn(f"conveyor: running {what} eagerly: {reason}", stacklevel=3)


def eager_lowering(request: Request, stage: str, reason: str) -> Lowering:
    """A wrapper stage's warned eager fallback for one program: the
    run-time half runs ``request``'s graph on the caller's tensors (aten ops,
    each under its captured grad mode: eager's semantics, autograd included),
    and the inner stages get a graph that takes the same inputs and returns
    nothing. Warns once, at compile time, naming ``stage`` and ``reason``."""
    warn_eager(f"a program (stage '{stage}')", reason)
    empty = torch.fx.Graph()
    for k, value in enumerate(request.inputs):
        empty.placeholder(f"arg{k}").meta["val"] = value
    empty.output(())
    inner = request.replace(graph=torch.fx.GraphModule(torch.nn.Module(), empty))
    graph = request.graph

    def wrap(_: CompiledFn) -> CompiledFn:
        def run(args: list[Any]) -> Sequence[Any]:
            return call_graph(graph, args)

        return run

    return Lowering((inner,), wrap)
