"""Triton's interpreter for CPU tensors.

Note [Choosing Triton's interpreter]: without a GPU, kernels run in Triton's
interpreter on CPU tensors. Triton decides at its first import whether its
library functions (``tl.sum``, ``tl.sigmoid``, ...) are interpreted, from
``TRITON_INTERPRET``; a kernel built later as an interpreted function cannot
call compiled ones, so the switch cannot be turned on per kernel. Tracing
imports triton (PyTorch probes for it), so the choice must come before the
first capture. It is made in one place, :func:`select`, when a pipeline that
has the triton stage is built (the stage's registration), never at import:
with no CUDA device, triton not imported yet and ``TRITON_INTERPRET`` unset,
it sets ``TRITON_INTERPRET=1``. Set the variable yourself (``0`` or ``1``)
to choose; :func:`prepare` checks the choice when the backend compiles.
"""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Iterable

import torch
from conveyor import StageError

SWITCH = "TRITON_INTERPRET"


def interpreting() -> bool:
    """Whether kernels will run in the interpreter: the switch is on and, if
    triton is already imported, it was on at import time (``tl.sum`` and the
    other library kernels are interpreted functions only then)."""
    if os.environ.get(SWITCH, "0").lower() not in ("1", "true", "on", "yes"):
        return False
    if "triton" not in sys.modules:
        return True
    import triton.language as tl

    return type(tl.standard.sum).__name__ == "InterpretedFunction"


def select() -> None:
    """Choose Triton's interpreter if no CUDA device is available, triton is
    not imported yet and the user has not set ``TRITON_INTERPRET`` either way
    (Note [Choosing Triton's interpreter]). Called when a pipeline with the
    triton stage is built."""
    if SWITCH not in os.environ and "triton" not in sys.modules and not torch.cuda.is_available():
        os.environ[SWITCH] = "1"


def prepare(devices: Iterable[torch.device], stage: str) -> None:
    """Check that kernels on ``devices`` can run: on CPU, in the interpreter.

    :raises StageError: CPU tensors, and the interpreter not chosen (or
        chosen after triton was imported).
    """
    if not any(d.type == "cpu" for d in devices):
        return
    if interpreting():
        problem = _interpreter_problem()
        if problem is not None:
            raise StageError(stage, problem)
        return
    raise StageError(
        stage,
        "kernels on CPU tensors need Triton's interpreter, but triton was imported without it; "
        "set TRITON_INTERPRET=1 in the environment before triton is first imported "
        "(or use the eager backend for CPU tensors)",
    )


@functools.cache
def _interpreter_problem() -> str | None:
    """Why the installed Triton's interpreter cannot run conveyor's kernels, or
    ``None``: one tiny kernel with a loop over a runtime bound, as every
    reduction has, run once per process. Triton 3.6's interpreter reads such
    a bound with ``int()`` on a one-element array, which numpy 2.4 refuses."""
    import numpy
    import triton

    from conveyor_triton import _probe_kernel

    out = torch.zeros(2, dtype=torch.int32)
    try:
        _probe_kernel.loop_over_runtime_bound[(1,)](out, 2, 1)
    except Exception as exc:  # the interpreter's own failure, named in the error
        return (
            f"Triton {triton.__version__}'s interpreter cannot run a loop over a runtime bound with numpy "
            f"{numpy.__version__} ({type(exc).__name__}: {exc}); install numpy<2.4 or a newer Triton, "
            "or use the eager backend for CPU tensors"
        )
    if out.tolist() != [0, 1]:
        return f"Triton {triton.__version__}'s interpreter ran its probe kernel wrongly (got {out.tolist()}, expected [0, 1])"
    return None
