"""What a plugin package imports on first use: its names (PEP 562) and
its stages' implementations.

Every pipeline build imports each plugin package to register its stages, so
a package whose ``__init__`` imports its implementation makes every pipeline
pay for it (the Triton backend: triton itself, about 0.09 s), or imports a
module too early (``torch._dynamo`` imports triton before the triton backend
chooses its interpreter). A package lists its public names and where each is
defined, and :func:`lazy_names` gives it the module ``__getattr__`` and
``__dir__`` that import them when first read.

Note [Stage implementations imported when they run]: a stage's ``impl``
(what traces and rewrites a graph: the autograd stage's joint trace and
partitioners, functionalization, Inductor's lowering) is needed only when
the stage runs. A program loaded from the disk cache runs no stage, yet
registering every stage imported every implementation: some 60 modules of
the plugin packages, about a tenth of a warm first call's own CPU time
behind ``torch.compile`` (issue 24). So a plugin registers its stage with
a :class:`LazyImpl` (the module and the name of the implementation), and
the implementation is imported on the stage's first run; what the loaded
program runs is imported by unpickling it. What is cheap to check is still
checked when the pipeline is built: the plugin's entry module imports and
its hook runs, the spec's metadata is validated, and
:meth:`LazyImpl.check` finds the implementation's module without importing
it (``conveyor.protocol.plugins``), so a misspelt module fails the build,
naming the plugin. A module that is found but fails to import fails the
stage's first run, naming the stage (a :class:`~conveyor.errors.StageError`).
A stage that must import more at build time says so with its ``probe``.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from collections.abc import Callable, Mapping
from typing import Any


def lazy_names(
    namespace: dict[str, Any], where: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for the module whose globals are
    ``namespace``: a name of ``where`` (name -> defining module) is imported
    when first read, then kept in ``namespace``."""
    module = namespace["__name__"]
    shadowed = frozenset(name for name, defined_in in where.items() if defined_in == f"{module}.{name}")
    if shadowed:  # Note [A name that is also a submodule]
        namespace["_lazy_shadowed"] = shadowed
        sys.modules[module].__class__ = _Package

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


class _Package(types.ModuleType):
    """Note [A name that is also a submodule]: a package that exports the
    function ``min_cut`` of its module ``min_cut`` bound the function over
    the module when its ``__init__`` imported it. Imported on first use, the
    import system would bind the module once something imports it, and the
    package's name would no longer be the function: binding a submodule
    under such a name binds that module's own name instead."""

    def __setattr__(self, name: str, value: Any) -> None:
        if (
            isinstance(value, types.ModuleType)
            and name in self.__dict__.get("_lazy_shadowed", ())
            and value.__name__ == f"{self.__name__}.{name}"
        ):
            value = getattr(value, name)
        super().__setattr__(name, value)


class LazyImpl:
    """A stage's ``impl`` imported on the stage's first run (Note [Stage
    implementations imported when they run]): ``LazyImpl(module, name)``
    stands for ``module.name()``, made once, whose ``lower`` (a wrapper
    stage) or ``compile`` (a backend) it calls."""

    def __init__(self, module: str, name: str) -> None:
        self.module = module
        self.name = name
        self._impl: Any = None

    def __repr__(self) -> str:
        return f"LazyImpl({self.module!r}, {self.name!r})"

    def check(self) -> None:
        """Find the implementation's module without importing it (its
        package is imported): ``ImportError`` when there is none."""
        if importlib.util.find_spec(self.module) is None:
            raise ImportError(f"no module named {self.module!r}")

    def load(self) -> Any:
        """The implementation, imported and made on the first call."""
        if self._impl is None:
            self._impl = getattr(importlib.import_module(self.module), self.name)()
        return self._impl

    def lower(self, request: Any, options: Mapping[str, Any]) -> Any:
        return self.load().lower(request, options)

    def compile(self, request: Any, options: Mapping[str, Any]) -> Any:
        return self.load().compile(request, options)
