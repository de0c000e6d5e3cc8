"""Registers the ``dedupe`` stage (entry point ``conveyor: dedupe``); its
implementation is imported when it first runs (Note [Stage implementations
imported when they run] in ``conveyor.protocol.lazy``)."""

from __future__ import annotations

from collections.abc import Callable

import conveyor
from conveyor import StageSpec
from conveyor.stage_api import LazyImpl

from conveyor_dedupe.keys import cache_key


@conveyor.hookimpl
def conveyor_register_stages(register: Callable[[StageSpec], None]) -> None:
    register(
        StageSpec(
            name="dedupe",
            kind="wrapper",
            impl=LazyImpl("conveyor_dedupe.stage", "Dedupe"),
            before=("synthetic_base", "functionalize"),
            reads=("aliasing",),
            cache_key=cache_key,
            description="the same tensor passed in several positions becomes one graph input",
        )
    )
