"""Names a plugin package imports on first use (PEP 562).

Every pipeline build imports each plugin package to register its stages, so
a package whose ``__init__`` imports its implementation makes every pipeline
pay for it (the Triton backend: triton itself, about 0.09 s), or imports a
module too early (``torch._dynamo`` imports triton before the triton backend
chooses its interpreter). A package lists its public names and where each is
defined, and :func:`lazy_names` gives it the module ``__getattr__`` and
``__dir__`` that import them when first read.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(
    namespace: dict[str, Any], where: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for the module whose globals are
    ``namespace``: a name of ``where`` (name -> defining module) is imported
    when first read, then kept in ``namespace``."""
    module = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        defined_in = where.get(name)
        if defined_in is None:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(defined_in), name)
        namespace[name] = value  # later reads find it without this hook
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *where})

    return __getattr__, __dir__
