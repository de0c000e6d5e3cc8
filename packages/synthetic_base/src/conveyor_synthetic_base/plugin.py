"""Registers the ``synthetic_base`` stage (entry point ``conveyor:
synthetic_base``); its implementation is imported when it first runs (Note
[Stage implementations imported when they run] in ``conveyor.protocol.lazy``)."""

from __future__ import annotations

from collections.abc import Callable

import conveyor
from conveyor import StageSpec
from conveyor.stage_api import LazyImpl

from conveyor_synthetic_base.sharing import cache_key


@conveyor.hookimpl
def conveyor_register_stages(register: Callable[[StageSpec], None]) -> None:
    register(
        StageSpec(
            name="synthetic_base",
            kind="wrapper",
            impl=LazyImpl("conveyor_synthetic_base.stage", "SyntheticBaseStage"),
            after=("dedupe",),
            before=("functionalize",),
            reads=("aliasing", "writing_nodes", "meta"),
            options={"tight": True},
            cache_key=cache_key,
            description="overlapping inputs that are mutated become one synthetic base",
        )
    )
