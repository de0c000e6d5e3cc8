"""Helpers shared by the autograd stage's tests (imported by name: the
tests directory is put on sys.path by conftest.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import conveyor
from conveyor import Plugins

#: the stages of the full pipeline up to the backend
FULL = ("dedupe", "synthetic_base", "functionalize", "autograd")


def pipeline(partitioner: str = "min_cut", **config: Any) -> Callable[[Any], Any]:
    """Compile with the installed full pipeline (other plugins not loaded),
    the eager backend and the given partitioner."""
    plugins = Plugins()
    plugins.load_entry_points(allow=FULL)
    stages = {**config.pop("stages", {}), "autograd": {"partitioner": partitioner}}
    return lambda f: conveyor.compile(f, plugins=plugins, backend="eager", stages=stages, **config)


def labels(compiled: Any, stage: str = "autograd") -> list[str]:
    """The labels of the graphs ``stage`` produced on the last call."""
    return [g.label for g in conveyor.last_graphs(compiled) if g.stage == stage and not g.step]
