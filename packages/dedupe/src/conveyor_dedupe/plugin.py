"""Registers the ``dedupe`` stage (entry point ``conveyor: dedupe``)."""

from __future__ import annotations

from collections.abc import Callable

import conveyor
from conveyor import StageSpec

from conveyor_dedupe.stage import Dedupe, cache_key


@conveyor.hookimpl
def conveyor_register_stages(register: Callable[[StageSpec], None]) -> None:
    register(
        StageSpec(
            name="dedupe",
            kind="wrapper",
            impl=Dedupe(),
            before=("synthetic_base", "functionalize"),
            reads=("aliasing",),
            cache_key=cache_key,
            description="the same tensor passed in several positions becomes one graph input",
        )
    )
