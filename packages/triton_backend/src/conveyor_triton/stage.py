"""The ``triton`` stage's name and options, apart from the backend.

Note [Registering without importing the backend]: every pipeline build
registers every installed stage (``conveyor_register_stages``), whichever
backend it uses. Importing :mod:`conveyor_triton.backend` there imported the
whole code generator, Inductor's Triton code generation and
``triton.language``: about 0.09 s of an Inductor or eager pipeline's first
call, for a stage it never runs. So the registration reads only this module
(name, options) and hands the core a :class:`LazyBackend`, which imports the
backend on its first compile. A pipeline that does include the stage still
imports the backend while it is built, through the stage's probe
(:func:`load_backend`), so a broken install fails there, loudly, naming the
stage, as it did at registration before.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from conveyor import CompiledFn, Request

    from conveyor_triton.backend import TritonBackend

STAGE = "triton"

OPTIONS: dict[str, Any] = {
    "cache_dir": None,  # where kernel sources are kept (default: ~/.cache/conveyor/triton)
    "log": False,  # print each kernel's source and file when it is first loaded
    "poison": False,  # fill outputs with a sentinel before each launch (tests)
    "decompose": True,  # retrace with the decomposition table first
    # sizes and strides as constants of the kernels (Note [Static layouts] in conveyor_triton.codegen);
    # the per-size programs of a symbolic graph always share generic kernels
    "static_layouts": True,
    # the device type launches are chosen for (Note [Launch configuration]); None: $CONVEYOR_TRITON_LAUNCH_FOR,
    # else the tensors' own. "cuda" on CPU runs the kernels a GPU would run in the interpreter (tests, PTX reports)
    "launch_for": None,
    # try a few launches of each static kernel at its first launch on a GPU, keep the fastest, and keep the
    # choice beside the kernel on disk (Note [Tuned launches] in conveyor_triton.tuning); never on CPU
    "autotune": True,
    # record each program's launches into a CUDA graph at its second call and replay it (Note [CUDA graphs]
    # in conveyor_triton.cuda_graphs): static inputs read in place, others copied in, outputs fresh tensors
    "cuda_graphs": False,
}


def load_backend() -> type[TritonBackend]:
    """The backend class, imported on first use (Note [Registering without
    importing the backend])."""
    from conveyor_triton.backend import TritonBackend

    return TritonBackend


def probe() -> None:
    """The stage's probe: a pipeline with the stage imports the backend
    while it is built, so that a broken install fails the build."""
    load_backend()


class LazyBackend:
    """The stage's ``impl``: a :class:`~conveyor_triton.backend.TritonBackend`
    made on the first compile (Note [Registering without importing the
    backend])."""

    def __init__(self) -> None:
        self._backend: TritonBackend | None = None

    def compile(self, request: Request, options: Mapping[str, Any]) -> CompiledFn:
        if self._backend is None:
            self._backend = load_backend()()
        return self._backend.compile(request, options)
