"""Registers the ``synthetic_base`` stage (entry point ``conveyor: synthetic_base``)."""

from __future__ import annotations

from collections.abc import Callable

import conveyor
from conveyor import StageSpec

from conveyor_synthetic_base.stage import SyntheticBaseStage, cache_key


@conveyor.hookimpl
def conveyor_register_stages(register: Callable[[StageSpec], None]) -> None:
    register(
        StageSpec(
            name="synthetic_base",
            kind="wrapper",
            impl=SyntheticBaseStage(),
            after=("dedupe",),
            before=("functionalize",),
            reads=("aliasing", "writing_nodes", "meta"),
            options={"tight": True},
            cache_key=cache_key,
            description="overlapping inputs that are mutated become one synthetic base",
        )
    )
