"""The ``compiled_autograd`` entry in the stage list: ``RunTimeBackward``.

Note [A run-time stage]: the stage protocol describes what happens when a
program is compiled (``lower(request) -> Lowering``). Compiled autograd
happens later and elsewhere: when ``.backward()`` runs, on a graph torch's
engine captures then, which spans every program and eager op of the
backward. So this package is used through its own context manager,
``conveyor_compiled_autograd.enable(...)``, and its stage entry is a wrapper
that passes every forward request through unchanged: it is there so that
``conveyor stages`` lists the package, its version and its options, and so
that its options can live in ``[tool.conveyor.stages.compiled_autograd]``.
Enabling it in a forward's configuration changes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from conveyor import Lowering, Request


class RunTimeBackward:
    """Passes forward requests through (see Note [A run-time stage])."""

    def lower(self, request: Request, options: Mapping[str, Any]) -> Lowering:
        return Lowering.passthrough(request)
