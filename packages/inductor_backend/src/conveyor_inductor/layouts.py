"""The layouts of a graph's values under Inductor.

Note [Layouts in the inductor backend]: conveyor's stages trace each graph
with the layouts eager gives (the fake values' strides) and rely on them on
both sides of the backend; Inductor chooses its own where nobody says
otherwise. Two places matter:

* **Views retraced with Inductor's decompositions.** A graph holds
  ``aten.view`` where the program's ``reshape`` found its input viewable
  (GPT-2's attention: ``key.transpose(-1, -2)`` expanded, then reshaped for
  ``bmm``). Retraced with Inductor's decompositions, an op before it may
  produce another layout, and the ``view`` fails ("Cannot view a tensor with
  shape ... and strides ..."). :func:`with_reshapes` hands the retrace a copy
  of the graph whose ``aten.view`` are ``aten.reshape``, which is what
  Inductor does to its own graphs before its fake propagation
  (``view_to_reshape``): a view where the layout allows it, a copy where not.
  The graph is functional (the functionalize stage replays writes and output
  aliases outside it), so a copy where there was a view changes no result.
* **Outputs.** Inductor keeps the strides of the outputs that
  ``compile_fx`` marks user-visible (``user_visible_output_idxs`` on the
  output node) and may change the others (a convolution's activation saved
  for the backward comes back channels-last). ``compile_fx_inner`` marks
  none by itself; AOTAutograd then restrides its backward graph's inputs to
  what the forward returned. conveyor's autograd stage compiles the backward
  with the strides the forward's graph says, and the functionalize stage
  replays output aliases by those strides, so :func:`keep_output_strides`
  marks every output user-visible, and :func:`changed_output_strides`
  checks what Inductor reports it returns (``output_strides`` of its
  compiled graph, read back from the FX graph cache on a hit), so that a
  torch that stops honouring the mark, or a cache entry written without it,
  is caught at compile time instead of by an assertion in the backward's
  generated code.
"""

from __future__ import annotations

from typing import Any

import torch

VIEW = torch.ops.aten.view.default
RESHAPE = torch.ops.aten.reshape.default


def with_reshapes(graph: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``graph``, or a copy of it whose ``aten.view`` nodes are ``aten.reshape``
    (sharing its attributes; node metadata copied shallowly)."""
    if not any(n.target is VIEW for n in graph.graph.nodes):
        return graph
    copied = torch.fx.Graph()
    copied._codegen = graph.graph._codegen
    result = copied.graph_copy(graph.graph, {})
    copied.output(result)
    for node in copied.nodes:
        if node.target is VIEW:
            node.target = RESHAPE
    return torch.fx.GraphModule(graph, copied, graph.__class__.__name__)


Strides = tuple[int, ...] | None


def output_strides(graph: torch.fx.GraphModule) -> tuple[Strides, ...] | None:
    """The strides of ``graph``'s outputs as its fake values say (``None`` for
    an output that is not a static strided tensor); ``None`` when the graph
    has no fake values (a graph loaded from the disk cache)."""
    _, returned = outputs(graph)
    strides: list[Strides] = []
    for r in returned:
        val = r.meta.get("val") if isinstance(r, torch.fx.Node) else None
        if isinstance(r, torch.fx.Node) and "val" not in r.meta:
            return None
        if isinstance(val, torch.Tensor) and val.layout is torch.strided:
            try:
                strides.append(tuple(int(s) for s in val.stride()))
                continue
            except (TypeError, ValueError):
                pass  # symbolic
        strides.append(None)
    return tuple(strides)


def restrided(results: tuple[Any, ...], expected: tuple[Strides, ...] | None) -> tuple[Any, ...]:
    """``results`` (traced values), each tensor whose strides differ from
    ``expected`` copied into a tensor with those strides."""
    if expected is None or len(expected) != len(results):
        return results
    fixed = []
    for value, strides in zip(results, expected):
        if (
            isinstance(value, torch.Tensor)
            and strides is not None
            and _differ(tuple(value.shape), tuple(value.stride()), strides)
        ):
            target = torch.empty_strided(value.shape, strides, dtype=value.dtype, device=value.device)
            value = torch.ops.aten.copy.default(target, value)
        fixed.append(value)
    return tuple(fixed)


def _differ(sizes: tuple[Any, ...], got: tuple[Any, ...], expected: tuple[int, ...]) -> bool:
    try:
        return any(int(n) > 1 and int(a) != b for n, a, b in zip(sizes, got, expected)) and 0 not in sizes
    except (TypeError, ValueError):
        return False  # symbolic


def outputs(gm: torch.fx.GraphModule) -> tuple[torch.fx.Node, list[Any]]:
    """The output node and what it returns, flat."""
    node = gm.graph.find_nodes(op="output")[0]
    returned = node.args[0]
    return node, list(returned) if isinstance(returned, (tuple, list)) else [returned]


def keep_output_strides(gm: torch.fx.GraphModule) -> None:
    """Mark every output of ``gm`` as one whose strides Inductor keeps."""
    node, returned = outputs(gm)
    node.meta["user_visible_output_idxs"] = [i for i, r in enumerate(returned) if isinstance(r, torch.fx.Node)]


#: each output's sizes and strides (``None``: not a static strided tensor), plain data
Layouts = tuple[tuple[tuple[int, ...], tuple[int, ...]] | None, ...]


def output_layouts(gm: torch.fx.GraphModule) -> Layouts:
    """The sizes and strides of ``gm``'s outputs as its fake values say
    (``None`` for an output without a static strided fake value)."""
    _, returned = outputs(gm)
    found: list[tuple[tuple[int, ...], tuple[int, ...]] | None] = []
    for r in returned:
        val = r.meta.get("val") if isinstance(r, torch.fx.Node) else None
        if not isinstance(val, torch.Tensor) or val.layout is not torch.strided:
            found.append(None)
            continue
        try:
            found.append((tuple(int(n) for n in val.shape), tuple(int(s) for s in val.stride())))
        except (TypeError, ValueError):
            found.append(None)  # symbolic
    return tuple(found)


def changed_output_strides(expected: Layouts, compiled: Any) -> list[str]:
    """The outputs whose strides Inductor reports differently from
    ``expected`` (:func:`output_layouts` of the graph it compiled; dimensions
    of size 0 or 1 ignored: their stride means nothing), as ``"output i:
    expected ..., got ..."``; empty when it reports none it could read
    (symbolic strides are not compared)."""
    reported = getattr(compiled, "output_strides", None)
    if not isinstance(reported, (list, tuple)):
        return []
    changed = []
    for i, (layout, strides) in enumerate(zip(expected, reported)):
        if layout is None or strides is None:
            continue
        sizes, want = layout
        try:
            got = tuple(int(s) for s in strides)
        except (TypeError, ValueError):
            continue  # symbolic
        if _differ(sizes, got, want):
            changed.append(f"output {i} (size {list(sizes)}): expected strides {list(want)}, got {list(got)}")
    return changed
