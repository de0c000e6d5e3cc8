"""Declares ``compiled_autograd`` to conveyor (entry point ``conveyor: compiled_autograd``).

Note [A run-time tool]: the stage protocol describes what happens when a
program is compiled (``lower(request) -> Lowering``). Compiled autograd
happens later and elsewhere: when ``.backward()`` runs, on a graph torch's
engine captures then, which spans every program and eager op of the
backward. So this package is no stage of the pipeline: it is used through
its own context manager, ``conveyor_compiled_autograd.enable(...)``, and it
declares itself as a tool (Note [Tools beside the stages] in
``conveyor.protocol.tool``), so that ``conveyor stages`` lists it, its
version and its options, and so that its options can live in
``[tool.conveyor.stages.compiled_autograd]``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import conveyor
from conveyor.stage_api import ToolSpec

from conveyor_compiled_autograd.names import OPTIONS, STAGE  # Note [Registering without importing torch's dynamo]


@conveyor.hookimpl
def conveyor_register_tools(register: Callable[[ToolSpec], None]) -> None:
    register(
        ToolSpec(
            name=STAGE,
            description=(
                "run time: captures each .backward() into one graph (conveyor's backward graphs inlined) "
                "and compiles it with the pipeline"
            ),
            usage="with conveyor_compiled_autograd.enable(): loss.backward()",
            options=OPTIONS,
        )
    )


@conveyor.hookimpl
def conveyor_demo(model: Any, data: Any, target: Any, steps: int, backend: str | None) -> int | None:
    from conveyor_compiled_autograd.demo import run

    return run(model, data, target, steps, backend)
