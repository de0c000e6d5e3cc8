"""Triton's interpreter for CPU tensors.

Without a GPU, kernels run in Triton's interpreter on CPU tensors; it must be
switched on (``TRITON_INTERPRET=1``) before triton is first imported (setting
it later breaks every kernel). Tracing imports triton (PyTorch probes for it),
so the backend cannot wait for its first compile: :func:`switch_on_if_no_gpu`
runs when this package is imported, which the pipeline does when it loads its
stages, before any capture.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable

import torch
from conveyor import StageError


def interpreting() -> bool:
    """Whether kernels will run in the interpreter: the switch is on and, if
    triton is already imported, it was on at import time (``tl.sum`` and the
    other library kernels are interpreted functions only then)."""
    if os.environ.get("TRITON_INTERPRET", "0").lower() not in ("1", "true", "on", "yes"):
        return False
    if "triton" not in sys.modules:
        return True
    import triton.language as tl

    return type(tl.standard.sum).__name__ == "InterpretedFunction"


def switch_on_if_no_gpu() -> None:
    """Set ``TRITON_INTERPRET=1`` if no CUDA device is available and triton
    is not imported yet (and the user has not set it either way)."""
    if "TRITON_INTERPRET" not in os.environ and "triton" not in sys.modules and not torch.cuda.is_available():
        os.environ["TRITON_INTERPRET"] = "1"


def prepare(devices: Iterable[torch.device], stage: str) -> None:
    """Make sure kernels on ``devices`` can run: on CPU, the interpreter.

    :raises StageError: CPU tensors, and triton already imported without the
        interpreter.
    """
    if not any(d.type == "cpu" for d in devices) or interpreting():
        return
    if "triton" not in sys.modules:
        os.environ["TRITON_INTERPRET"] = "1"
        return
    raise StageError(
        stage,
        "kernels on CPU tensors need Triton's interpreter, but triton was imported without it; "
        "set TRITON_INTERPRET=1 in the environment before triton is first imported "
        "(or use the eager backend for CPU tensors)",
    )
