"""conveyor-compiled-autograd: one captured, compiled backward for the whole ``.backward()``.

    import conveyor_compiled_autograd as cca

    with cca.enable(backend="eager") as session:   # the option keys of conveyor.compile
        loss.backward()
    session.captures, session.last.inlined, session.last.opaque, session.last.graphs
"""

from conveyor_compiled_autograd.__about__ import __version__
from conveyor_compiled_autograd.capture import ConveyorCapture, inline_supported, probe
from conveyor_compiled_autograd.runtime import HIGHER_ORDER, CompiledBackward
from conveyor_compiled_autograd.session import Capture, Session, enable

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
