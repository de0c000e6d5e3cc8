"""Registration of the ``autograd`` stage."""

from __future__ import annotations

from collections.abc import Callable

from conveyor import StageSpec, hookimpl

from conveyor_autograd.joint import STAGE
from conveyor_autograd.stage import Autograd


@hookimpl
def conveyor_register_stages(register: Callable[[StageSpec], None]) -> None:
    register(
        StageSpec(
            name=STAGE,
            kind="wrapper",
            impl=Autograd(),
            after=("functionalize",),
            options={"partitioner": "min_cut"},
            description="joint forward+backward, partitioned (min_cut | save_eager), run in an autograd.Function",
        )
    )
