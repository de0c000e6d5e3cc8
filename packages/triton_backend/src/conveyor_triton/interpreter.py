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
    if not any(d.type == "cpu" for d in devices) or interpreting():
        return
    raise StageError(
        stage,
        "kernels on CPU tensors need Triton's interpreter, but triton was imported without it; "
        "set TRITON_INTERPRET=1 in the environment before triton is first imported "
        "(or use the eager backend for CPU tensors)",
    )
