"""The ``conveyor`` command: ``conveyor --version``, ``conveyor stages [--json]``
and ``conveyor demo``.

``conveyor stages`` is one report (:func:`stages_report`, built from one
:class:`~conveyor.protocol.pipeline.Pipeline`) and two printers of it, text
and JSON, so the two forms cannot disagree.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import platform
import re
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from conveyor.__about__ import __version__
from conveyor.errors import ConveyorError
from conveyor.protocol.config import Config, resolve
from conveyor.protocol.pipeline import Pipeline
from conveyor.protocol.plugins import ENTRY_POINT_GROUP, RegisteredStage, RegisteredTool

# distributions torch's Triton comes as, probed in this order
TRITON_DISTRIBUTIONS = ("triton", "pytorch-triton", "pytorch-triton-rocm", "pytorch-triton-xpu")


# ---------------------------------------------------------------- the report


@dataclass(frozen=True)
class StageRow:
    """One installed stage as ``conveyor stages`` shows it.

    :ivar position: 1-based place in the pipeline; ``None`` when not in it.
    :ivar why: why it is or is not in the pipeline.
    :ivar options: declared option names and defaults.
    :ivar resolved: the options the stage runs with (defaults overlaid by
        config); ``None`` when it is not in the pipeline.
    """

    name: str
    kind: str
    description: str
    plugin: str
    distribution: str | None
    version: str | None
    position: int | None
    enabled: bool
    why: str
    after: tuple[str, ...]
    before: tuple[str, ...]
    requires: tuple[str, ...]
    reads: tuple[str, ...]
    default_for: tuple[str, ...]
    fuses_pointwise: bool
    options: dict[str, Any]
    resolved: dict[str, Any] | None


@dataclass(frozen=True)
class ToolRow:
    """One installed tool (Note [Tools beside the stages] in ``conveyor.protocol.tool``)."""

    name: str
    description: str
    plugin: str
    distribution: str | None
    version: str | None
    usage: str
    options: dict[str, Any]
    resolved: dict[str, Any]


@dataclass(frozen=True)
class StagesReport:
    """What ``conveyor stages`` prints: the stages (pipeline order first, then
    the others by name), the tools by name, and the resolved pipeline."""

    conveyor_core: str
    backend: str
    pipeline: tuple[str, ...]
    stages: tuple[StageRow, ...]
    tools: tuple[ToolRow, ...]


def stages_report(config: Config) -> StagesReport:
    """Build the pipeline of ``config`` and describe every installed stage and tool."""
    pipeline = Pipeline(config)
    order = {s.name: i for i, s in enumerate(pipeline.stages)}
    ranked = sorted(
        pipeline.available.values(), key=lambda r: (order.get(r.spec.name, len(order)), r.spec.name)
    )
    return StagesReport(
        conveyor_core=__version__,
        backend=pipeline.backend.name,
        pipeline=tuple(s.name for s in pipeline.stages),
        stages=tuple(_stage_row(r, order.get(r.spec.name), pipeline) for r in ranked),
        tools=tuple(_tool_row(t, pipeline.tool_options[n]) for n, t in sorted(pipeline.tools.items())),
    )


def _stage_row(reg: RegisteredStage, index: int | None, pipeline: Pipeline) -> StageRow:
    spec = reg.spec
    return StageRow(
        name=spec.name,
        kind=spec.kind,
        description=spec.description,
        plugin=reg.plugin,
        distribution=reg.distribution,
        version=reg.version,
        position=None if index is None else index + 1,
        enabled=index is not None,
        why=_why(reg, index is not None, pipeline.config),
        after=spec.after,
        before=spec.before,
        requires=spec.requires,
        reads=spec.reads,
        default_for=spec.default_for,
        fuses_pointwise=spec.fuses_pointwise,
        options=dict(spec.options),
        resolved=pipeline.options.get(spec.name),
    )


def _why(reg: RegisteredStage, enabled: bool, config: Config) -> str:
    """Why a stage is in the pipeline or not, in the words of the config."""
    spec = reg.spec
    if spec.kind == "backend":
        if not enabled:
            return "backend not chosen"
        return "backend chosen by config" if config.backend == spec.name else "default backend"
    if enabled:
        return "enabled by config" if spec.name in config.enable else "enabled by default"
    if spec.name in config.disable:
        return "disabled by config"
    return "off by default (enable it in config)"


def _tool_row(reg: RegisteredTool, resolved: Mapping[str, Any]) -> ToolRow:
    spec = reg.spec
    return ToolRow(
        name=spec.name,
        description=spec.description,
        plugin=reg.plugin,
        distribution=reg.distribution,
        version=reg.version,
        usage=spec.usage,
        options=dict(spec.options),
        resolved=dict(resolved),
    )


# ---------------------------------------------------------------- printers


def print_json(report: StagesReport) -> None:
    """The report as one JSON document; an option value JSON cannot hold is its ``repr``."""
    print(json.dumps(asdict(report), indent=2, default=repr))


def print_text(report: StagesReport) -> None:
    """The report as a table, the declarations, the tools and the pipeline."""
    rows = [
        ("-" if r.position is None else f"{r.position}.", r.name, r.kind, r.why, _dist(r), r.description)
        for r in report.stages
    ]
    rows += [("-", t.name, "tool", "not a pipeline stage", _dist(t), t.description) for t in report.tools]
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    print("order  stage / kind / status / distribution")
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r[:5], widths, strict=False)) + (f"  {r[5]}" if r[5] else ""))
    print("\ndeclared (the core orders and checks stages by these):")
    for row in sorted(report.stages, key=lambda r: r.name):
        print(f"  {row.name}: {_declared(row)}")
    if report.tools:
        print("\ntools (used through their own API; options in [tool.conveyor.stages.<name>]):")
        for tool in report.tools:
            options = f"; options {_options(tool.options, tool.resolved)}" if tool.options else ""
            print(f"  {tool.name}: `{tool.usage}`{options}")
    print("\npipeline: " + " -> ".join(report.pipeline))


def _dist(row: StageRow | ToolRow) -> str:
    return f"{row.distribution or row.plugin} {row.version or ''}".strip()


def _declared(row: StageRow) -> str:
    parts = [
        f"{label} {', '.join(names)}"
        for label, names in (
            ("after", row.after),
            ("before", row.before),
            ("requires", row.requires),
            ("reads", row.reads),
            ("default backend for", row.default_for),
        )
        if names
    ]
    if row.fuses_pointwise:  # Note [Facts of the backend]
        parts.append("fuses pointwise ops")
    if row.options:
        parts.append("options " + _options(row.options, row.resolved))
    return "; ".join(parts) or "nothing"


def _options(defaults: Mapping[str, Any], resolved: Mapping[str, Any] | None) -> str:
    """``name=value`` per option: the resolved value, its default beside it where config changed it."""
    shown = []
    for name, default in defaults.items():
        value = default if resolved is None else resolved.get(name, default)
        shown.append(f"{name}={value!r}" + (f" (default {default!r})" if value != default else ""))
    return ", ".join(shown)


# ---------------------------------------------------------------- --version


def versions() -> list[tuple[str, str]]:
    """conveyor-core, every other installed conveyor distribution, torch and
    Triton (where installed), as (distribution, version), probed from the
    installed metadata."""
    return [("conveyor-core", __version__), *_conveyor_distributions(), *_toolchain()]


def _conveyor_distributions() -> list[tuple[str, str]]:
    """Installed distributions named ``conveyor*`` or declaring ``conveyor``
    entry points (stage packages, tools, the meta-package), by name, once each."""
    found: dict[str, tuple[str, str]] = {}
    for dist in importlib.metadata.distributions():
        name = dist.metadata["Name"] or ""
        key = _canonical(name)
        if key != "conveyor-core" and (key.startswith("conveyor") or _declares_plugins(dist)):
            found.setdefault(key, (name, dist.version))
    return [found[key] for key in sorted(found)]


def _toolchain() -> list[tuple[str, str]]:
    """torch's version and Triton's, under whichever distribution name it came."""
    torch = [("torch", v) for v in (_installed("torch"),) if v is not None]
    triton = [(n, v) for n in TRITON_DISTRIBUTIONS if (v := _installed(n)) is not None]
    return torch + triton[:1]


def _canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _declares_plugins(dist: importlib.metadata.Distribution) -> bool:
    return any(ep.group == ENTRY_POINT_GROUP for ep in dist.entry_points)


def _installed(name: str) -> str | None:
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


class _VersionAction(argparse.Action):
    """``--version``: print :func:`versions` (probed only when asked) and exit."""

    def __init__(
        self, option_strings: Sequence[str], dest: str = argparse.SUPPRESS, help: str | None = None
    ) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS, help=help)

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option_string: str | None = None
    ) -> None:
        for name, version in versions():
            print(f"{name} {version}")
        print(f"python {platform.python_version()}")
        parser.exit()


# ---------------------------------------------------------------- commands


def stages(args: argparse.Namespace) -> int:
    """List discovered stages and tools, their distributions, and the resolved order."""
    report = stages_report(resolve({"backend": args.backend} if args.backend else {}))
    (print_json if args.json else print_text)(report)
    return 0


def demo(args: argparse.Namespace) -> int:
    from conveyor.demo import run_demo

    return run_demo(steps=args.steps, backend=args.backend)


_CONFIG_SOURCES = (
    "Configuration comes from [tool.conveyor] in the nearest pyproject.toml, then the environment "
    "(CONVEYOR_BACKEND, CONVEYOR_ENABLE, CONVEYOR_DISABLE, CONVEYOR_AUTOLOAD, CONVEYOR_PLUGINS, "
    "CONVEYOR_BLOCK_PLUGINS, ...), then this command's options."
)


def build_parser() -> argparse.ArgumentParser:
    """The ``conveyor`` argument parser, every subcommand and option documented."""
    parser = argparse.ArgumentParser(prog="conveyor", description="conveyor: a staged AOT compiler for PyTorch")
    parser.add_argument(
        "--version", action=_VersionAction,
        help="print conveyor-core's version, each installed conveyor distribution's, torch's and Triton's, and exit",
    )
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser(
        "stages", epilog=_CONFIG_SOURCES,
        help="list stages and tools, versions and the resolved pipeline order",
        description="List the installed stages and tools: kind, distribution and version, whether each stage "
        "is in the pipeline and why, what it declares (after, before, requires, reads, default_for, fuses_pointwise), "
        "its options (defaults and resolved values), and the resolved pipeline order.",
    )
    p.add_argument(
        "--backend", default=None, metavar="NAME",
        help="the backend stage to resolve the pipeline with (default: config, else eager)",
    )
    p.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    p.set_defaults(run=stages)
    p = sub.add_parser(
        "demo", epilog=_CONFIG_SOURCES,
        help="compile and train a small model, compare with eager",
        description="Train a small transformer block compiled by conveyor and the same block in eager, "
        "print both losses per step, the stages' graphs and whether they match.",
    )
    p.add_argument("--steps", type=int, default=5, metavar="N", help="training steps to run (default: %(default)s)")
    p.add_argument(
        "--backend", default=None, metavar="NAME", help="the backend stage to compile with (default: config, else eager)"
    )
    p.set_defaults(run=demo)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``conveyor`` command; the exit status is returned, also for
    ``--help``, ``--version`` and usage errors (argparse's ``SystemExit``)."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 2)
    try:
        return int(args.run(args))
    except ConveyorError as exc:
        print(f"conveyor: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
