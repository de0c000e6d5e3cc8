"""How many times the pipeline compiled, for tests and benchmarks that check
that a program compiles once (or once per specialization) and then reuses."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from conveyor.protocol.pipeline import Pipeline


@contextlib.contextmanager
def counting_compiles() -> Iterator[list[int]]:
    """``with counting_compiles() as count:``: ``count[0]`` is the number of
    ``Pipeline.compile`` calls (any pipeline, both entry points) inside the
    block. A test tool: it wraps ``Pipeline.compile`` for the block's length
    and restores it on exit, so it must not be used from several threads."""
    count = [0]
    original = Pipeline.compile

    def counting(self: Pipeline, request: object) -> object:
        count[0] += 1
        return original(self, request)  # type: ignore[arg-type]

    Pipeline.compile = counting  # type: ignore[method-assign,assignment]
    try:
        yield count
    finally:
        Pipeline.compile = original  # type: ignore[method-assign]
