"""What a package that is not a compile-time stage declares: ``ToolSpec``.

Note [Tools beside the stages]: the stage protocol describes what happens
when a program is compiled (``lower(request) -> Lowering``). Some packages
work elsewhere: ``conveyor_compiled_autograd`` captures each ``.backward()``
at run time, through its own context manager, and compiles that graph with
the pipeline. Such a package declares itself through the
``conveyor_register_tools`` hook, so that ``conveyor stages`` lists it with
its distribution and version, and so that its options live beside the
stages' (``[tool.conveyor.stages.<name>]``) and are checked when a pipeline
is built, as a stage's are; the package reads them from
``Pipeline.tool_options``. A tool is never in a pipeline: it has no place in
the order and nothing to enable.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class ToolSpec:
    """How a tool declares itself to the core (Note [Tools beside the stages]).

    :ivar name: unique among stages and tools: the name of its option table
        (``[tool.conveyor.stages.<name>]``, ``compile(fn, stages={name: {...}})``).
    :ivar description: one line for ``conveyor stages``.
    :ivar usage: how it is used, for ``conveyor stages``
        (``"with conveyor_compiled_autograd.enable(**options): loss.backward()"``).
    :ivar options: option names and their defaults; other names are errors.
    """

    name: str
    description: str
    usage: str
    options: Mapping[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "").isalnum():
            raise ValueError(f"tool name {self.name!r} must be a non-empty identifier")
        if not self.usage:
            raise ValueError(f"tool {self.name!r}: say how it is used (usage)")
        object.__setattr__(self, "options", dict(self.options))
