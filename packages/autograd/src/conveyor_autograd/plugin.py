"""Registration of the ``autograd`` stage.

The stage's implementation (the joint trace, the partitioners) is imported
when the stage first runs (Note [Stage implementations imported when they
run] in ``conveyor.protocol.lazy``): a program loaded from the disk cache
imports only its run time, ``conveyor_autograd.runtime``.
"""

from __future__ import annotations

from collections.abc import Callable

from conveyor import StageSpec, hookimpl
from conveyor.stage_api import LazyImpl


@hookimpl
def conveyor_register_stages(register: Callable[[StageSpec], None]) -> None:
    register(
        StageSpec(
            name="autograd",  # conveyor_autograd.joint.STAGE
            kind="wrapper",
            impl=LazyImpl("conveyor_autograd.stage", "Autograd"),
            after=("functionalize",),
            options={"partitioner": "auto"},  # min_cut where the backend fuses pointwise ops, else save_eager
            description="joint forward+backward, partitioned (auto | min_cut | save_eager), run in an autograd.Function",
        )
    )
