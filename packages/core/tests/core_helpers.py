"""Small stages for the core's tests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from conveyor import Lowering, Request, StageSpec


class Passthrough:
    """A wrapper stage that records what it saw and changes nothing."""

    def __init__(self) -> None:
        self.seen: list[Request] = []
        self.calls = 0

    def lower(self, request: Request, options: Mapping[str, Any]) -> Lowering:
        self.seen.append(request)

        def wrap(inner: Any) -> Any:
            def run(args: list[Any]) -> Any:
                self.calls += 1
                return inner(args)

            return run

        return Lowering((request,), wrap)


def wrapper(name: str, **kw: Any) -> StageSpec:
    return StageSpec(name=name, kind="wrapper", impl=kw.pop("impl", None) or Passthrough(), **kw)


class GraphBackend:
    def compile(self, request: Request, options: Mapping[str, Any]) -> Any:
        graph = request.graph
        return lambda args: graph(*args)


def backend(name: str, **kw: Any) -> StageSpec:
    return StageSpec(name=name, kind="backend", impl=GraphBackend(), **kw)
