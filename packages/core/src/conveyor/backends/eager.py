"""The reference backend: run the final FX graph with aten, as it is."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from conveyor.stage import CompiledFn, Request


class EagerBackend:
    """Runs ``request.graph`` eagerly. Autograd, if the graph's ops need it,
    is recorded by PyTorch as usual."""

    def compile(self, request: Request, options: Mapping[str, Any]) -> CompiledFn:
        graph = request.graph

        def run(args: list[Any]) -> Sequence[Any]:
            return graph(*args)

        return run
