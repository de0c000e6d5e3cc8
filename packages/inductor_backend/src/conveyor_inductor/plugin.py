"""Registers the ``inductor`` backend stage (entry point ``conveyor: inductor``)."""

from __future__ import annotations

from collections.abc import Callable

import conveyor
from conveyor import StageSpec

from conveyor_inductor.backend import OPTIONS, STAGE, InductorBackend
from conveyor_inductor.probe import probe


@conveyor.hookimpl
def conveyor_register_stages(register: Callable[[StageSpec], None]) -> None:
    register(
        StageSpec(
            name=STAGE,
            kind="backend",
            impl=InductorBackend(),
            after=("dedupe", "synthetic_base", "functionalize", "autograd"),
            options=OPTIONS,
            probe=probe,  # Note [Probing Inductor]: checked when a pipeline chooses this backend
            description="Inductor's code generation: C++ kernels on CPU, Triton kernels on CUDA",
            fuses_pointwise=True,  # the autograd stage's default partitioner recomputes pointwise ops for it
        )
    )
