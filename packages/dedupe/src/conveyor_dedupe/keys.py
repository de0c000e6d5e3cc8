"""What the ``dedupe`` stage specializes on (its ``cache_key``), apart
from its implementation, which the registration does not import (Note
[Stage implementations imported when they run] in ``conveyor.protocol.lazy``).
"""

from __future__ import annotations

from conveyor.stage_api import CallSignature


def cache_key(signature: CallSignature) -> tuple[int, ...]:
    """Which flat arguments are the same tensor object: ``f(x, x)`` and
    ``f(x, y)`` compile separately. Where the call's signature (Note [The
    call signature], one storage scan per call) says that no two tensor
    inputs share a storage, none is passed twice: ``()``, with no scan of
    our own; otherwise its ``same`` positions."""
    return () if signature.unshared else signature.same
