"""Choosing and ordering the stages of one pipeline.

Order comes from the stages' declarations (``after``, ``before``), never from
the order plugins were installed or registered in: Kahn's algorithm with ties
broken by stage name, so the same set of stages gives the same order every run.
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping

from conveyor.errors import ConfigError, PipelineError
from conveyor.protocol.config import Config
from conveyor.protocol.stage import StageSpec


def select(available: Mapping[str, StageSpec], config: Config, default_backend: str) -> list[StageSpec]:
    """The enabled stages, ordered outermost first, the backend last."""
    names = sorted(available)
    for key in ("enable", "disable"):
        unknown = sorted(set(getattr(config, key)) - set(available))
        if unknown:
            raise ConfigError(
                f"config {key!r}{config.source_of(key)}: unknown stage(s) {unknown}; installed stages are {names}"
            )
    unknown_opts = sorted(set(config.stages) - set(available))
    if unknown_opts:
        raise ConfigError(
            f"config 'stages'{config.source_of('stages')}: options for unknown stage(s) {unknown_opts}; "
            f"installed stages are {names}"
        )

    backends = sorted(n for n, s in available.items() if s.kind == "backend")
    backend = config.backend or default_backend
    if backend not in available:
        raise ConfigError(
            f"config 'backend'{config.source_of('backend')}: unknown backend {backend!r}; installed backends are {backends}"
        )
    if available[backend].kind != "backend":
        raise ConfigError(f"config 'backend': {backend!r} is a wrapper stage; backends are {backends}")
    if backend in config.disable:
        raise ConfigError(f"config: backend {backend!r} is also disabled")
    extra = sorted(n for n in config.enable if available[n].kind == "backend" and n != backend)
    if extra:
        raise PipelineError(
            f"several backends enabled: {sorted([backend, *extra])}; choose one with 'backend'"
        )

    enabled = {
        n: s
        for n, s in available.items()
        if s.kind == "wrapper"
        and n not in config.disable
        and (s.enabled_by_default or n in config.enable)
    }
    enabled[backend] = available[backend]
    for name, spec in sorted(enabled.items()):
        missing = [r for r in spec.requires if r not in enabled]
        if missing:
            why = "disabled" if all(m in available for m in missing) else "not installed"
            fix = f"enable {missing}" if why == "disabled" else f"install {missing}"
            raise ConfigError(f"stage {name!r} requires {missing}, which are {why}: {fix} or disable {name!r}")
    return toposort(enabled)


def toposort(stages: Mapping[str, StageSpec]) -> list[StageSpec]:
    """Order ``stages`` so every ``after``/``before`` edge holds; backends last.

    Constraints naming stages that are not in ``stages`` are ignored (they
    order against a stage only when it is enabled). Raises
    :class:`PipelineError` naming the stages of a cycle.
    """
    succ: dict[str, set[str]] = {n: set() for n in stages}
    for name, spec in stages.items():
        for a in spec.after:
            if a in stages:
                succ[a].add(name)
        for b in spec.before:
            if b in stages:
                succ[name].add(b)
        if spec.kind == "wrapper":
            for other, o in stages.items():
                if o.kind == "backend":
                    succ[name].add(other)
    indeg = {n: 0 for n in stages}
    for targets in succ.values():
        for t in targets:
            indeg[t] += 1
    ready = [n for n, d in indeg.items() if d == 0]
    heapq.heapify(ready)
    order: list[str] = []
    while ready:
        n = heapq.heappop(ready)
        order.append(n)
        for t in succ[n]:
            indeg[t] -= 1
            if indeg[t] == 0:
                heapq.heappush(ready, t)
    if len(order) != len(stages):
        raise PipelineError(f"stage ordering has a cycle among {_cycle(succ, set(stages) - set(order))}")
    return [stages[n] for n in order]


def _cycle(succ: Mapping[str, set[str]], left: set[str]) -> list[str]:
    """One cycle among the stages ``left`` (each on a cycle or behind one),
    in edge order, its first stage repeated at the end. Walked backwards:
    every stage left has a predecessor left (its in-degree never reached
    zero), while a stage behind a cycle may have no successor left."""
    pred = {n: sorted(s for s in left if n in succ[s]) for n in left}
    path: list[str] = []
    seen: dict[str, int] = {}
    node = min(left)
    while node not in seen:
        seen[node] = len(path)
        path.append(node)
        node = pred[node][0]
    cycle = path[seen[node] :][::-1]
    first = cycle.index(min(cycle))  # the same stage first, however the walk entered it
    cycle = cycle[first:] + cycle[:first]
    return [*cycle, cycle[0]]
