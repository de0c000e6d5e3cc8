"""Registers the ``functionalize`` stage (entry point ``conveyor:
functionalize``); its implementation, :mod:`conveyor_functionalize.stage`,
is imported when it first runs (Note [Stage implementations imported when
they run] in ``conveyor.protocol.lazy``)."""

from __future__ import annotations

from collections.abc import Callable

from conveyor import StageSpec, hookimpl
from conveyor.stage_api import LazyImpl

STAGE = "functionalize"


@hookimpl
def conveyor_register_stages(register: Callable[[StageSpec], None]) -> None:
    register(
        StageSpec(
            name=STAGE,
            kind="wrapper",
            impl=LazyImpl("conveyor_functionalize.stage", "Functionalize"),
            after=("dedupe", "synthetic_base"),
            reads=("statically_functional", "aliasing", "analysis", "meta"),
            description="hands inner stages a purely functional graph; replays mutations and output aliases at run time",
        )
    )
