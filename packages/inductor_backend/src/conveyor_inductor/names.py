"""The ``inductor`` stage's options, apart from the backend, which the
registration does not import (Note [Stage implementations imported when they
run] in ``conveyor.protocol.lazy``)."""

from __future__ import annotations

from typing import Any

OPTIONS: dict[str, Any] = {
    # Inductor configuration for this backend's compiles, as torch._inductor.config.patch takes it
    # ({"fallback_random": True}, {"cpp.simdlen": 0}); part of the compile-cache key
    "config": {},
}
