"""Registers the ``inductor`` backend stage (entry point ``conveyor: inductor``).

The backend is imported when it first compiles (Note [Stage implementations
imported when they run] in ``conveyor.protocol.lazy``): a program loaded
from the disk cache imports only its run time, ``conveyor_inductor.program``.
The probe, run when a pipeline with the stage is built, imports Inductor
itself (Note [Probing Inductor]).
"""

from __future__ import annotations

from collections.abc import Callable

import conveyor
from conveyor import StageSpec
from conveyor.stage_api import LazyImpl

from conveyor_inductor.names import OPTIONS
from conveyor_inductor.probe import STAGE, probe


@conveyor.hookimpl
def conveyor_register_stages(register: Callable[[StageSpec], None]) -> None:
    register(
        StageSpec(
            name=STAGE,
            kind="backend",
            impl=LazyImpl("conveyor_inductor.backend", "InductorBackend"),
            after=("dedupe", "synthetic_base", "functionalize", "autograd"),
            options=OPTIONS,
            probe=probe,  # Note [Probing Inductor]: checked when a pipeline chooses this backend
            description="Inductor's code generation: C++ kernels on CPU, Triton kernels on CUDA",
            fuses_pointwise=True,  # the autograd stage's default partitioner recomputes pointwise ops for it
        )
    )
