"""The pipelines behind dynamo, one per configuration.

Note [One pipeline per configuration behind dynamo]: dynamo calls the
backend once per graph it makes, and building a pipeline reads the
entry-point group and loads every plugin (about 5 ms: a third of a small
graph's compile, paid again at every graph break). So the pipelines built
here are kept, by the resolved configuration (which holds the environment
and ``pyproject.toml`` layers, read again on every call) and ``sys.path``
(which decides the entry points found): a changed setting, or a plugin put
on the path, builds anew. A pipeline is stateless between compiles
(``conveyor.compile`` keeps one for all its calls too); the most recent few
are kept. A configuration that fails to build keeps nothing.
"""

from __future__ import annotations

import sys
from typing import Any

from conveyor.protocol.config import Config
from conveyor.protocol.pipeline import Pipeline

#: the pipelines kept, most recent last, each with its key ``(config, tuple(sys.path))``
_pipelines: list[tuple[tuple[Any, ...], Pipeline]] = []
_KEPT_PIPELINES = 8


def pipeline_of(config: Config) -> Pipeline:
    """The pipeline of ``config`` (Note [One pipeline per configuration behind dynamo])."""
    key = (config, tuple(sys.path))
    for kept, pipeline in _pipelines:
        try:
            same = bool(kept == key)
        except Exception:  # a stage option whose == does not answer a bool (an array)
            same = False
        if same:
            return pipeline
    pipeline = Pipeline(config)  # fails loudly, and then keeps nothing
    _pipelines.append((key, pipeline))
    del _pipelines[:-_KEPT_PIPELINES]
    return pipeline
