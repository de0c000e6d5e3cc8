"""conveyor-compiled-autograd: one captured, compiled backward for the whole ``.backward()``.

    import conveyor_compiled_autograd as cca

    with cca.enable(backend="eager") as session:   # the option keys of conveyor.compile
        loss.backward()
    session.captures, session.last.inlined, session.last.opaque, session.last.graphs
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from conveyor_compiled_autograd.__about__ import __version__

if TYPE_CHECKING:
    from conveyor_compiled_autograd.capture import ConveyorCapture, inline_supported, probe
    from conveyor_compiled_autograd.runtime import HIGHER_ORDER, CompiledBackward
    from conveyor_compiled_autograd.session import Capture, Session, enable

#: name -> the module that defines it, imported on first use (Note [Registering
#: without importing torch's dynamo] in ``names``)
_LAZY = {
    "ConveyorCapture": "capture",
    "inline_supported": "capture",
    "probe": "capture",
    "HIGHER_ORDER": "runtime",
    "CompiledBackward": "runtime",
    "Capture": "session",
    "Session": "session",
    "enable": "session",
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.{module}"), name)


__all__ = [
    "HIGHER_ORDER",
    "Capture",
    "CompiledBackward",
    "ConveyorCapture",
    "Session",
    "__version__",
    "enable",
    "inline_supported",
    "probe",
]
