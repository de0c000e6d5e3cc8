"""Registers the ``compiled_autograd`` stage (entry point ``conveyor: compiled_autograd``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import conveyor
from conveyor import StageSpec

from conveyor_compiled_autograd.program import STAGE
from conveyor_compiled_autograd.stage import RunTimeBackward


@conveyor.hookimpl
def conveyor_register_stages(register: Callable[[StageSpec], None]) -> None:
    register(
        StageSpec(
            name=STAGE,
            kind="wrapper",
            impl=RunTimeBackward(),
            enabled_by_default=False,
            description=(
                "run time: `with conveyor_compiled_autograd.enable(**options):` captures each .backward() into "
                "one graph (conveyor's backward graphs inlined) and compiles it; passes forward programs through"
            ),
        )
    )


@conveyor.hookimpl
def conveyor_demo(model: Any, data: Any, target: Any, steps: int, backend: str | None) -> int | None:
    from conveyor_compiled_autograd.demo import run

    return run(model, data, target, steps, backend)
