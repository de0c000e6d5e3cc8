"""Registers the ``triton`` backend stage (entry point ``conveyor: triton``).

The registration imports neither the backend nor triton (Note [Registering
without importing the backend] in :mod:`conveyor_triton.stage`).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import conveyor
from conveyor import StageSpec

from conveyor_triton import interpreter
from conveyor_triton.stage import OPTIONS, STAGE, LazyBackend, probe


@conveyor.hookimpl
def conveyor_register_stages(register: Callable[[StageSpec], None]) -> None:
    interpreter.select()  # before any capture imports triton (Note [Choosing Triton's interpreter])
    register(
        StageSpec(
            name=STAGE,
            kind="backend",
            impl=LazyBackend(),
            after=("dedupe", "synthetic_base", "functionalize", "autograd"),
            options=OPTIONS,
            default_for=("cuda",),
            reads=("aliasing",),
            # programs compiled with launches for another device type are not reused (from memory or disk)
            cache_key=lambda args: os.environ.get("CONVEYOR_TRITON_LAUNCH_FOR"),
            description="fused Triton kernels (interpreter on CPU), aten fallbacks listed in a report",
            fuses_pointwise=True,  # the autograd stage's default partitioner recomputes pointwise ops for it
            probe=probe,  # a pipeline with the stage imports the backend while it is built
        )
    )
