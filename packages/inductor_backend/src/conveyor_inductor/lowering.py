"""One graph through Inductor: decomposed with Inductor's table, then compiled.

The backend's compile and a program loaded from conveyor's disk cache share
the second half; a loaded program skips the first, since it stores the graph
the first half made (Note [Storing Inductor programs] in ``program.py``).
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

import conveyor
import torch
from conveyor import StageError

from conveyor_inductor import fx_cache, fx_entry, layouts
from conveyor_inductor.probe import STAGE, api

log = logging.getLogger(__name__)


def decompose(graph: torch.fx.GraphModule, where: fx_cache.Scope, config: dict[str, Any]) -> torch.fx.GraphModule:
    """``graph`` retraced on ``where``'s fake inputs with Inductor's
    decompositions (Note [Symbolic sizes in the inductor backend]), a plain
    ``GraphModule`` whose outputs keep ``graph``'s strides and are all marked
    user-visible (Note [Layouts in the inductor backend]). Under the stage's
    Inductor options ``config``: the table depends on them (Note [Random ops in
    the inductor backend])."""
    with api().config.patch(config):
        return _decompose(graph, where)


def _decompose(graph: torch.fx.GraphModule, where: fx_cache.Scope) -> torch.fx.GraphModule:
    table = {op: fn for op, fn in api().decompositions().items() if op is not torch.ops.aten.detach.default}
    source = layouts.with_reshapes(graph)  # Note [Layouts in the inductor backend]
    expected = layouts.output_strides(graph)

    def run(*flat: Any) -> tuple[Any, ...]:
        return layouts.restrided(tuple(conveyor.call_graph(source, flat)), expected)

    with fx_cache.plain_graph_modules():  # one cache key on both entry points (Note [Inductor's FX graph cache])
        gm = conveyor.retrace(run, where.inputs, where.fake_mode, decomposition_table=table)
    layouts.keep_output_strides(gm)
    return gm


# Note [Random ops in the inductor backend]: ``torch.compile``'s Inductor runs
# its joint-graph passes before ``compile_fx_inner``; one of them
# (``replace_random_passes``) turns ``aten.rand``/``randn`` into Inductor's
# seeded random ops, and Inductor's lowering refuses the aten ops it expects
# that pass to have replaced ("should have been handled in replace_random.py").
# The backend runs that pass on each graph it compiles, under the stage's
# Inductor options: with ``fallback_random`` the pass does nothing and Inductor
# calls aten's random ops (eager's generator, eager's numbers); otherwise the
# numbers are Inductor's own, as under ``torch.compile``. The decompositions
# are chosen under those options too: without ``fallback_random`` Inductor's
# table spells ``exponential`` (of ``F.gumbel_softmax``) and other draws with
# ``rand`` and a formula, whose numbers are not eager's even when ``rand``'s are
# (test_cpu_repro.py's gumbel_softmax program: its gradient differed).
def compile_decomposed(
    gm: torch.fx.GraphModule,
    where: fx_cache.Scope,
    label: str,
    config: dict[str, Any],
    expected: layouts.Layouts | None = None,
    entry: list[fx_entry.EntryKey] | None = None,
) -> Any:
    """Inductor's callable for the decomposed ``gm`` (on ``where``'s fake
    inputs), compiled where ``where`` says so that Inductor's FX graph cache
    can serve it (Note [Inductor's FX graph cache]); its outputs checked to
    keep the ``expected`` layouts, by default those of ``gm``'s fake values
    (Note [Layouts in the inductor backend]). ``gm`` has its ``meta["val"]``
    set, or comes with ``expected`` (Note [Fake values Inductor makes
    itself] in ``program.py``). Inductor may rewrite ``gm`` in place. When
    ``entry`` is a list, the key Inductor keeps the program under is
    appended to it, if there is one (Note [Inductor's entry by its stored
    key])."""
    inductor = api()
    if expected is None:
        expected = layouts.output_layouts(gm)
    if not where.cached:
        log.debug("%s: Inductor's FX graph cache not used: %s", label, where.why)
    with where.entered(), inductor.config.patch({**config, **where.config}):
        inductor.replace_random(gm, where.fake_mode)  # Note [Random ops in the inductor backend]
        keyed = entry is not None and where.cached
        context = fx_entry.context_of(gm, list(where.inputs), label == "backward") if keyed else None
        compiled = inductor.compile_graph(gm, list(where.inputs), is_backward=label == "backward")
    changed = layouts.changed_output_strides(expected, compiled)
    if changed and where.cached:  # a cache entry written without the mark: compile it afresh
        log.debug("%s: Inductor's cached program changed output strides (%s): compiling again", label, changed)
        with where.entered(), inductor.config.patch({**config, "fx_graph_cache": False}):
            compiled = inductor.compile_graph(gm, list(where.inputs), is_backward=label == "backward")
        changed = layouts.changed_output_strides(expected, compiled)
    if changed:
        raise StageError(
            STAGE,
            f"Inductor returns the {label} graph's outputs in other layouts than the graph's "
            f"({'; '.join(changed)}): this torch does not honour user_visible_output_idxs "
            "(Note [Layouts in the inductor backend])",
        )
    found = fx_entry.stored_key(compiled, context) if keyed else None
    if entry is not None and found is not None:
        entry.append(found)
    return compiled


def load_entry(
    entry: fx_entry.EntryKey,
    graph: Callable[[], torch.fx.GraphModule],
    where: fx_cache.Scope,
    label: str,
    config: dict[str, Any],
    expected: layouts.Layouts,
) -> Any:
    """Inductor's program under the stored ``entry`` for the loaded graph
    (``graph()``, made only if Inductor reads it), if it is found and keeps the ``expected`` layouts, else ``None``
    (then :func:`compile_decomposed` compiles it: Note [Inductor's entry by
    its stored key])."""
    with where.entered(), api().config.patch({**config, **where.config}):
        compiled = fx_entry.load(entry, graph, list(where.inputs), label == "backward")
    if compiled is None:
        return None
    changed = layouts.changed_output_strides(expected, compiled)
    if changed:
        log.debug("%s: Inductor's entry changed output strides (%s): compiling again", label, changed)
        return None
    log.debug("%s: Inductor's entry %s loaded by its stored key", label, entry.key)
    return compiled
