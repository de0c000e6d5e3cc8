"""conveyor-compiled-autograd: one captured, compiled backward for the whole ``.backward()``.

    import conveyor_compiled_autograd as cca

    with cca.enable(backend="eager") as session:   # the option keys of conveyor.compile
        loss.backward()
    session.captures, session.last.inlined, session.last.opaque, session.last.graphs
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from conveyor.stage_api import lazy_names

from conveyor_compiled_autograd.__about__ import __version__

if TYPE_CHECKING:
    from conveyor_compiled_autograd.capture import ConveyorCapture, inline_supported, probe
    from conveyor_compiled_autograd.runtime import HIGHER_ORDER, CompiledBackward
    from conveyor_compiled_autograd.session import Capture, Session, enable

#: name -> the module that defines it, imported on first use (Note [Registering
#: without importing torch's dynamo] in ``names``)
_WHERE = {
    "ConveyorCapture": "conveyor_compiled_autograd.capture",
    "inline_supported": "conveyor_compiled_autograd.capture",
    "probe": "conveyor_compiled_autograd.capture",
    "HIGHER_ORDER": "conveyor_compiled_autograd.runtime",
    "CompiledBackward": "conveyor_compiled_autograd.runtime",
    "Capture": "conveyor_compiled_autograd.session",
    "Session": "conveyor_compiled_autograd.session",
    "enable": "conveyor_compiled_autograd.session",
}

__getattr__, __dir__ = lazy_names(globals(), _WHERE)


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
