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
            options={"partitioner": "auto"},  # min_cut where the backend fuses pointwise ops, else save_eager
            description="joint forward+backward, partitioned (auto | min_cut | save_eager), run in an autograd.Function",
        )
    )
