"""A check for stage authors: a compiled program survives the persistent
compile cache (Note [Picklable run-time callables] in ``conveyor.protocol.artifacts``)."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from conveyor.testing.checker import Checked, check


def check_round_trip(fn: Callable[..., Any], *args: Any, folder: Path, **options: Any) -> Checked:
    """Compile ``fn`` with the persistent compile cache in ``folder`` and
    check it against eager (:func:`conveyor.testing.check`), then compile it
    again as a new process would: the second compile must load the stored
    program, run no stage, and give eager's results too.

    :param folder: an empty folder for the cache (pytest's ``tmp_path``).
    :param options: configuration keys for ``conveyor.compile``; the
        installed stages (entry points) are loaded unless they say otherwise.
    :returns: the second check, whose ``compiled`` ran the loaded program.
    :raises AssertionError: when the program was not stored (the reason the
        cache logged is in the message) or does not match eager after a load.
    """
    import conveyor
    from conveyor.protocol.pipeline import Pipeline

    runs: list[object] = []
    original = Pipeline.compile

    def counting(pipeline: Pipeline, request: Any) -> Any:
        runs.append(request)
        return original(pipeline, request)

    def compile(f: Callable[..., Any]) -> Any:
        return conveyor.compile(f, **{"autoload": True, **options, "cache": True, "cache_dir": str(folder)})

    with _replaced(Pipeline, "compile", counting), _collected("conveyor.disk_cache") as logged:
        check(fn, *args, compile=compile)
        compiled_first = len(runs)
        checked = check(fn, *args, compile=compile)
    if not compiled_first:
        raise AssertionError("round trip: the first compile ran no pipeline (nothing to store)")
    if len(runs) != compiled_first:
        reasons = [m for m in logged if m.startswith(("not stored", "not cached", "discarding"))]
        raise AssertionError(f"round trip: the second compile ran the pipeline again: {reasons or logged}")
    return checked


@contextlib.contextmanager
def _replaced(owner: Any, name: str, value: Any) -> Iterator[None]:
    saved = getattr(owner, name)
    setattr(owner, name, value)
    try:
        yield
    finally:
        setattr(owner, name, saved)


@contextlib.contextmanager
def _collected(logger_name: str) -> Iterator[list[str]]:
    messages: list[str] = []

    class Handler(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            messages.append(record.getMessage())

    logger = logging.getLogger(logger_name)
    handler, level = Handler(logging.DEBUG), logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield messages
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)
