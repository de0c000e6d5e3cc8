"""The ``conveyor`` command: ``conveyor stages`` and ``conveyor demo``."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from conveyor.errors import ConveyorError
from conveyor.protocol.config import resolve
from conveyor.protocol.pipeline import Pipeline
from conveyor.protocol.plugins import RegisteredStage, RegisteredTool
from conveyor.protocol.stage import StageSpec
from conveyor.protocol.tool import ToolSpec


def stages(args: argparse.Namespace) -> int:
    """List discovered stages and tools, their distributions, and the resolved order."""
    config = resolve({"backend": args.backend} if args.backend else {})
    pipeline = Pipeline(config)
    order = {s.name: i for i, s in enumerate(pipeline.stages)}
    rows: list[tuple[str, ...]] = []
    for name, reg in sorted(pipeline.available.items(), key=lambda kv: (order.get(kv[0], 1_000), kv[0])):
        spec = reg.spec
        if name in order:
            state = f"{order[name] + 1}."
            why = "backend" if spec.kind == "backend" else "enabled"
        else:
            state = "-"
            if name in config.disable:
                why = "disabled by config"
            elif spec.kind == "backend":
                why = "backend not chosen"
            else:
                why = "off by default (enable it in config)"
        rows.append((state, name, spec.kind, why, _dist(reg), spec.description))
    for name, tool in sorted(pipeline.tools.items()):  # Note [Tools beside the stages]
        rows.append(("-", name, "tool", "not a pipeline stage", _dist(tool), tool.spec.description))
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    print("order  stage / kind / status / distribution")
    for r in rows:
        print("  ".join(c.ljust(w) for c, w in zip(r[:5], widths, strict=False)) + (f"  {r[5]}" if r[5] else ""))
    print("\ndeclared (the core orders and checks stages by these):")
    for name, reg in sorted(pipeline.available.items()):
        print(f"  {name}: {_declared(reg.spec)}")
    if pipeline.tools:
        print("\ntools (used through their own API; options in [tool.conveyor.stages.<name>]):")
        for name, tool in sorted(pipeline.tools.items()):
            print(f"  {name}: {_used(tool.spec)}")
    print("\npipeline: " + " -> ".join(s.name for s in pipeline.stages))
    return 0


def _dist(registered: RegisteredStage | RegisteredTool) -> str:
    return f"{registered.distribution or registered.plugin} {registered.version or ''}".strip()


def _used(spec: ToolSpec) -> str:
    options = "; options " + ", ".join(f"{k}={v!r}" for k, v in spec.options.items()) if spec.options else ""
    return f"`{spec.usage}`{options}"


def _declared(spec: StageSpec) -> str:
    parts = [
        f"{label} {', '.join(names)}"
        for label, names in (
            ("after", spec.after),
            ("before", spec.before),
            ("requires", spec.requires),
            ("reads", spec.reads),
            ("default backend for", spec.default_for),
        )
        if names
    ]
    if spec.options:
        parts.append("options " + ", ".join(f"{k}={v!r}" for k, v in spec.options.items()))
    return "; ".join(parts) or "nothing"


def demo(args: argparse.Namespace) -> int:
    from conveyor.demo import run_demo

    return run_demo(steps=args.steps, backend=args.backend)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="conveyor", description="conveyor: a staged AOT compiler for PyTorch")
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("stages", help="list stages and tools, versions and the resolved pipeline order")
    p.add_argument("--backend", default=None)
    p.set_defaults(run=stages)
    p = sub.add_parser("demo", help="compile and train a small model, compare with eager")
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--backend", default=None)
    p.set_defaults(run=demo)
    args = parser.parse_args(argv)
    try:
        return int(args.run(args))
    except ConveyorError as exc:
        print(f"conveyor: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
