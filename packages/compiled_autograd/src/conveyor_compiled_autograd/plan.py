"""How a captured backward graph runs: ``Plan``, a list of steps.

torch's compiled-autograd capture is one FX graph with five placeholders
(``inputs, sizes, scalars, hooks, packed_data``) and three kinds of nodes:

* *pure* nodes: C++ backward formulas (``ops.<Name>Backward0``),
  ``ops.validate_outputs``, ``torch.add`` (gradients of a tensor used twice
  summed), aten ops (the backward graphs conveyor copied in,
  Note [Inlined backward]) and ``getitem`` of their results. They compute
  tensors from tensors and sizes, and nothing else: conveyor compiles them;
* *opaque* nodes: everything with an effect or user code: hooks
  (``call_hook``), foreign ``autograd.Function`` backwards (``call_backward``),
  ``call_accumulate_grad``, the final-callbacks stub, and any call this module
  does not know (Note [Unknown nodes are opaque]). They run at run time, in
  graph order, as torch would run them;
* *plumbing*: placeholders, ``getitem`` of the placeholders or of an opaque
  result, ``unwrap_maybe_dynamic_int`` (a size, passed as ``empty(0, n)``),
  ``get_attr``. Plain Python, evaluated at run time.

Note [Segments by level]: a pure node's *level* is the number of opaque
nodes that must run before it (the largest ordinal + 1 of an opaque node it
depends on). All pure nodes of one level form one :class:`Segment`, compiled
as one program; segment ``k`` runs right before opaque node ``k``. A pure
node that depends on opaque node ``j`` has level ``> j``, and an opaque node
``k`` depends only on values of level ``<= k``, so every value exists when it
is read. The common case (no hook feeds a gradient back) is one segment with
the whole backward, followed by the accumulations. Hooks that read nothing
the segment computes later (post-accumulate-grad hooks, module post hooks)
run after the whole computation rather than interleaved: each runs once,
with eager's values.

Note [Unknown nodes are opaque]: the capture's node vocabulary is private to
torch and changes between versions. A call this module does not recognise is
run as it is, in order, never traced: slower, never wrong.
"""

from __future__ import annotations

import operator
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.fx

Kind = Literal["plumbing", "pure", "opaque"]


def _pure_targets() -> tuple[tuple[type, ...], frozenset[Any]]:
    from torch._dynamo import compiled_autograd as ca

    op_type = getattr(ca, "Op", None)
    types: tuple[type, ...] = (torch._ops.OpOverload, torch._ops.OpOverloadPacket)
    if isinstance(op_type, type):
        types = (*types, op_type)
    # torch.add: the engine summing the gradients of a tensor used twice (its input buffer)
    return types, frozenset({getattr(ca.ops, "validate_outputs", None), torch.add, operator.add} - {None})


def _plumbing_targets() -> frozenset[Any]:
    from torch._dynamo import external_utils

    return frozenset({getattr(external_utils, "unwrap_maybe_dynamic_int", None)} - {None})


def classify(graph: torch.fx.Graph) -> dict[torch.fx.Node, Kind]:
    """The kind of every node (see the module docstring)."""
    pure_types, pure_fns = _pure_targets()
    plumbing_fns = _plumbing_targets()
    kinds: dict[torch.fx.Node, Kind] = {}
    for node in graph.nodes:
        kind: Kind
        if node.op in ("placeholder", "get_attr", "output"):
            kind = "plumbing"
        elif node.op != "call_function":
            kind = "opaque"
        elif node.target is operator.getitem:
            source = node.args[0]
            kind = kinds[source] if isinstance(source, torch.fx.Node) else "plumbing"
            if kind == "opaque":
                kind = "plumbing"
        elif node.target in plumbing_fns:
            kind = "plumbing"
        elif isinstance(node.target, pure_types) or node.target in pure_fns:
            kind = "pure"
        else:
            kind = "opaque"
        kinds[node] = kind
    return kinds


@dataclass(frozen=True)
class Segment:
    """Pure nodes of one level (Note [Segments by level]), compiled as one program.

    :ivar level: runs before the opaque node of this ordinal.
    :ivar nodes: the pure nodes, in graph order.
    :ivar inputs: values from outside the segment that its nodes read.
    :ivar outputs: its values that later steps (or the graph's output) read.
    """

    level: int
    nodes: tuple[torch.fx.Node, ...]
    inputs: tuple[torch.fx.Node, ...]
    outputs: tuple[torch.fx.Node, ...]

    def __post_init__(self) -> None:
        inside = set(self.nodes)
        if any(n in inside for n in self.inputs):
            raise ValueError("Segment: an input is computed inside the segment")
        if any(n not in inside for n in self.outputs):
            raise ValueError("Segment: an output is not computed inside the segment")

    @property
    def computes(self) -> bool:
        """Whether it runs any formula (a segment of ``getitem`` only is not compiled)."""
        return any(n.target is not operator.getitem for n in self.nodes)


Step = tuple[Literal["plumbing", "segment", "opaque"], Any]


@dataclass(frozen=True)
class Plan:
    """The steps that run one captured graph, in order.

    :ivar steps: ``("plumbing", node)``, ``("segment", Segment)`` or
        ``("opaque", node)``.
    :ivar output: the graph's output node.
    :ivar opaque: the opaque nodes, in graph order.
    """

    steps: tuple[Step, ...]
    output: torch.fx.Node
    opaque: tuple[torch.fx.Node, ...]

    @property
    def segments(self) -> tuple[Segment, ...]:
        return tuple(s for kind, s in self.steps if kind == "segment")


def _inputs_of(node: torch.fx.Node) -> list[torch.fx.Node]:
    return list(node.all_input_nodes)


def plan(graph: torch.fx.Graph) -> Plan:
    """Split a captured graph into segments and opaque steps (Note [Segments by level])."""
    kinds = classify(graph)
    level: dict[torch.fx.Node, int] = {}
    opaque: list[torch.fx.Node] = []
    output: torch.fx.Node | None = None
    for node in graph.nodes:
        if node.op == "output":
            output = node
            continue
        deps = _inputs_of(node)
        if kinds[node] == "opaque":
            level[node] = len(opaque)  # its ordinal
            opaque.append(node)
            continue
        lv = 0
        for d in deps:
            lv = max(lv, level[d] + 1 if kinds[d] == "opaque" else level[d])
        level[node] = lv
    assert output is not None
    by_level: dict[int, list[torch.fx.Node]] = {}
    plumbing: dict[int, list[torch.fx.Node]] = {}
    for node in graph.nodes:
        if node.op == "output":
            continue
        if kinds[node] == "pure":
            by_level.setdefault(level[node], []).append(node)
        elif kinds[node] == "plumbing" and node.op != "placeholder":
            plumbing.setdefault(level[node], []).append(node)
    steps: list[Step] = []
    for lv in range(len(opaque) + 1):
        steps.extend(("plumbing", n) for n in plumbing.get(lv, ()))
        nodes = by_level.get(lv, [])
        if nodes:
            steps.append(("segment", _segment(lv, nodes)))
        if lv < len(opaque):
            steps.append(("opaque", opaque[lv]))
    return Plan(tuple(steps), output, tuple(opaque))


def _segment(lv: int, nodes: list[torch.fx.Node]) -> Segment:
    inside = set(nodes)
    inputs: dict[torch.fx.Node, None] = {}
    for n in nodes:
        for d in _inputs_of(n):
            if d not in inside:
                inputs[d] = None
    outputs = [n for n in nodes if any(u not in inside for u in n.users)]
    return Segment(lv, tuple(nodes), tuple(inputs), tuple(outputs))


def run_node(node: torch.fx.Node, env: dict[torch.fx.Node, Any], root: torch.nn.Module) -> Any:
    """Run one node on the values in ``env`` (plumbing, opaque and
    uncompiled pure nodes)."""
    if node.op == "get_attr":
        obj: Any = root
        for part in str(node.target).split("."):
            obj = getattr(obj, part)
        return obj
    args, kwargs = torch.fx.node.map_arg((node.args, node.kwargs), env.__getitem__)
    target: Callable[..., Any] = node.target  # type: ignore[assignment]
    return target(*args, **kwargs)
