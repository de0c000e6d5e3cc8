"""The hooks a conveyor plugin can implement.

A plugin is a module or object with functions decorated by
``conveyor.hookimpl``, found through the entry-point group ``conveyor`` or
registered in-process with ``Plugins.register``. The order of stages is never
pluggy's registration order: the core sorts stages from their declarations
(see ``conveyor.protocol.ordering``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pluggy

from conveyor.protocol.stage import CompiledFn, Lowering, Request, StageSpec
from conveyor.protocol.tool import ToolSpec

hookspec = pluggy.HookspecMarker("conveyor")
hookimpl = pluggy.HookimplMarker("conveyor")


@hookspec
def conveyor_register_stages(register: Callable[[StageSpec], None]) -> None:
    """Declare the stages this plugin contributes.

    Called by the core once per plugin manager, when a pipeline is first built.

    :param register: call it once per stage with a :class:`~conveyor.StageSpec`.
        Registering two stages with one name is an error naming both plugins.
    :return: nothing.
    """


@hookspec
def conveyor_register_tools(register: Callable[[ToolSpec], None]) -> None:
    """Declare the tools this plugin contributes: packages that are not a
    compile-time stage (Note [Tools beside the stages] in
    ``conveyor.protocol.tool``).

    Called by the core once per plugin manager, when a pipeline is built,
    so that ``conveyor stages`` lists each tool with its distribution and
    version, and its options in config (``[tool.conveyor.stages.<name>]``)
    are checked like a stage's.

    :param register: call it once per tool with a
        :class:`~conveyor.stage_api.ToolSpec`. A tool named like another
        tool or a stage is an error naming both plugins.
    :return: nothing.
    """


@hookspec(firstresult=True)
def conveyor_run_stage(
    stage: StageSpec, request: Request, options: dict[str, Any]
) -> Lowering | CompiledFn | None:
    """Run one stage's compile-time half on a request.

    Called by the pipeline driver's loop once per stage per request,
    outermost stage first (every request of one stage before the next
    stage). The core's own implementation calls ``stage.impl.lower(request,
    options)`` for a wrapper and ``stage.impl.compile(request, options)`` for a
    backend, with ``request.seen_by(stage)``: its program record shows only
    the parts ``stage.reads`` declares (Note [Declared reads] in
    ``conveyor.analysis.program``); a wrapper of this hook receives the whole
    record. Implement it as a new-style wrapper (``@hookimpl(wrapper=True)``,
    one ``yield``) to time stages, dump graphs or check invariants; the
    ``yield`` returns the stage's result, which the wrapper must return (or
    replace). Stops at first non-None result. While it runs,
    :func:`conveyor.stamp` records graphs for this stage and request (Note
    [Stamps] in ``conveyor.protocol.stamps``).

    :param stage: the stage being run.
    :param request: the request the stage receives.
    :param options: the stage's resolved options (defaults overlaid by config).
    :return: a :class:`~conveyor.Lowering` for a wrapper stage, a compiled
        callable for a backend.
    """


@hookspec
def conveyor_demo(model: Any, data: Any, target: Any, steps: int, backend: str | None) -> int | None:
    """Add a section to ``conveyor demo``.

    Called by ``conveyor demo`` after its own compiled-vs-eager run, once per
    plugin that implements it (in registration order), so that a package
    that is not a compile-time stage can show itself without the core naming
    it.

    :param model: a fresh copy of the demo model (``DemoModel``), to train.
    :param data: the demo's input batch.
    :param target: the demo's class targets (``nn.CrossEntropyLoss``).
    :param steps: how many training steps the user asked for.
    :param backend: the backend the user asked for, or ``None``.
    :return: ``0`` when the section matched eager, ``1`` when it did not,
        ``None`` when it showed nothing.
    """
