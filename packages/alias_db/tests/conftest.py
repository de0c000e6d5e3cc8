"""alias_db tests: the rebuild-and-compare check is on for every update, and a
helper traces a function to an aten graph on fake tensors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest
import torch
import torch.fx
from conveyor_alias_db.debug import ENV_VAR
from torch.fx.experimental.proxy_tensor import make_fx


@pytest.fixture(autouse=True)
def _verify_every_update(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(ENV_VAR, "1")


class Traced:
    """A traced graph and its nodes by name."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        self.gm = gm
        self.graph = gm.graph

    def __getitem__(self, name: str) -> torch.fx.Node:
        for node in self.graph.nodes:
            if node.name == name:
                return node
        raise KeyError(f"no node {name!r} in\n{self.graph}")

    def ops(self, target: Any) -> list[torch.fx.Node]:
        """The nodes calling ``target``, in order."""
        return [n for n in self.graph.nodes if n.target is target]


@pytest.fixture
def trace() -> Callable[..., Traced]:
    """``trace(fn, *example_args)``: ``fn`` traced by make_fx on fake tensors."""

    def run(fn: Callable[..., Any], *args: Any) -> Traced:
        return Traced(make_fx(fn, tracing_mode="fake")(*args))

    return run
