"""Fusion groups: which nodes become one kernel.

Note [Linear index]: every value inside a group is addressed by the linear
(row-major) index of its element in its own logical shape. A pointwise group
iterates over ``numel`` elements; a node may join when its operands from the
group sit at the same linear index (same shape up to size-1 dimensions), so a
view that keeps the row-major order (``view``, ``unsqueeze``, ``squeeze``) is
free inside a group. A *row* group also has a reduction over the trailing
``R`` elements of that order: its values are either ``full`` (linear index
``i``) or ``row`` (index ``i // R``, one per row), and a row value broadcast
along the trailing dimensions may feed a full node. Several reductions over
the same rows share one group (softmax, layer norm and their backwards).

Legality: groups never span a node that writes to memory (Note [Write
barriers]), and joining a group never makes it depend on a step that depends
on it (no cycles in the step graph).

Note [Permuted groups]: a reduction over leading dimensions (a bias or norm
weight gradient sums over the batch) addresses its full values with the
dimensions permuted (kept ones first, reduced ones last), so the reduced
elements of one output again sit in one row. Every full value of such a group
has the same logical shape (no views), loads and stores go through the
permuted sizes and strides, and row values keep the natural order of the kept
dimensions.

Note [Write barriers]: a graph that still contains mutation (functionalize
disabled) is cut at each writing node into segments; every group lies in one
segment and steps run segment by segment, so every read sees exactly the
writes eager's would.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

import torch
import torch.fx

from conveyor_triton.classify import ORDER_KEEPING_VIEWS, NodeClass
from conveyor_triton.ops import RULES

Kind = Literal["full", "row"]


@dataclass(eq=False)
class Group:
    """A fusion group while it is being formed.

    :ivar members: node -> kind, in graph order.
    :ivar numel: number of full elements.
    :ivar reduce: ``R`` once the group has a reduction, else None.
    :ivar rows: ``X`` once the group has a reduction.
    :ivar perm: for a group whose reduction is not over trailing dimensions,
        the order (kept dimensions, then reduced ones) its full values are
        addressed in (Note [Permuted groups]); None otherwise.
    :ivar shape: the logical shape of every full value of a permuted group.
    :ivar reduced: the dimensions (of ``shape``) a permuted group reduces.
    """

    step: int
    segment: int
    numel: int
    members: dict[torch.fx.Node, Kind] = field(default_factory=dict)
    reduce: int | None = None
    rows: int | None = None
    perm: tuple[int, ...] | None = None
    shape: tuple[int, ...] | None = None
    reduced: tuple[int, ...] = ()
    reads: set[torch.fx.Node] = field(default_factory=set)


@dataclass(frozen=True)
class Step:
    """One unit of the run-time program: a fusion group, an aten view, an aten
    call (fallback), or a graph input."""

    kind: Literal["input", "group", "view", "aten"]
    node: torch.fx.Node | None
    group: Group | None
    segment: int
    position: int


def _shape(node: torch.fx.Node) -> tuple[int, ...]:
    return tuple(node.meta["val"].shape)


def _numel(node: torch.fx.Node) -> int:
    return math.prod(_shape(node))


def contiguous_strides(shape: tuple[int, ...]) -> list[int]:
    strides, acc = [], 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= s
    return strides[::-1]


def reduction_dims(node: torch.fx.Node) -> tuple[int, ...]:
    """The dimensions a reduction node reduces, sorted (empty list: all)."""
    rank = len(_shape(node.args[0]))  # type: ignore[arg-type]
    dims = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    if dims is None or (isinstance(dims, (list, tuple)) and len(dims) == 0):
        return tuple(range(rank))
    dims = [dims] if isinstance(dims, int) else list(dims)
    return tuple(sorted({d % max(rank, 1) for d in dims})) if rank else ()


def access_ok(src: tuple[int, ...], src_kind: Kind, dst: tuple[int, ...], dst_kind: Kind, reduce: int) -> bool:
    """Whether a value of shape ``src`` (kind ``src_kind``), broadcast to the
    shape ``dst`` of a ``dst_kind`` node, is read at the same linear index
    (Note [Linear index])."""
    if len(src) > len(dst) or (src_kind == "full" and dst_kind == "row"):
        return False
    padded = (1,) * (len(dst) - len(src)) + src
    if any(s not in (1, d) for s, d in zip(padded, dst)):
        return False
    src_strides = contiguous_strides(padded)
    expanded = [0 if s == 1 else st for s, st in zip(padded, src_strides)]
    dst_strides = contiguous_strides(dst)
    scale = reduce if (src_kind == "row" and dst_kind == "full") else 1
    if scale != 1 and scale not in dst_strides and scale != math.prod(dst):
        return False
    for size, e, c in zip(dst, expanded, dst_strides):
        if size == 1:
            continue
        if c >= scale:
            if c % scale or e != c // scale:
                return False
        elif e != 0:
            return False
    return True


def _row_broadcast_ok(src: tuple[int, ...], dst: tuple[int, ...], reduced: tuple[int, ...]) -> bool:
    """In a permuted group: a row value of shape ``src`` broadcast to the full
    shape ``dst`` is constant along the ``reduced`` dimensions and equal to
    ``dst`` along the others (so its linear index is that of the kept ones)."""
    if len(src) > len(dst):
        return False
    padded = (1,) * (len(dst) - len(src)) + src
    return all(s == 1 if i in reduced else s == d for i, (s, d) in enumerate(zip(padded, dst)))


class Fuser:
    """Forms fusion groups over a decomposed graph, in one pass in graph order."""

    def __init__(self, graph: torch.fx.Graph, classes: dict[torch.fx.Node, NodeClass]) -> None:
        self.classes = classes
        self.steps: list[Step] = []
        self.deps: list[set[int]] = []
        self.step_of: dict[torch.fx.Node, int] = {}
        self.group_of: dict[torch.fx.Node, Group] = {}
        segment = 0
        for position, node in enumerate(graph.nodes):
            if node.op == "output":
                continue
            cls = classes.get(node)
            if cls is not None and cls.writes:
                segment += 1
                self._new_step("aten", node, segment, position)
                segment += 1
            elif node.op == "placeholder":
                self._new_step("input", node, segment, position)
            elif node.op != "call_function":
                self._new_step("aten", node, segment, position)
            elif cls.category == "pointwise":
                self._pointwise(node, segment, position)
            elif cls.category == "reduction":
                self._reduction(node, segment, position)
            elif cls.category == "view":
                self._view(node, segment, position)
            else:
                self._new_step("aten", node, segment, position)

    # -- steps and their dependencies -------------------------------------
    def _new_step(self, kind: str, node: torch.fx.Node, segment: int, position: int, group: Group | None = None) -> int:
        index = len(self.steps)
        self.steps.append(Step(kind, node if group is None else None, group, segment, position))  # type: ignore[arg-type]
        self.deps.append({self.step_of[a] for a in node.all_input_nodes})
        self.step_of[node] = index
        return index

    def _reaches(self, start: set[int], target: int) -> bool:
        seen, stack = set(), list(start)
        while stack:
            s = stack.pop()
            if s == target:
                return True
            if s not in seen:
                seen.add(s)
                stack.extend(self.deps[s])
        return False

    def _join(self, node: torch.fx.Node, group: Group, kind: Kind) -> bool:
        """Add ``node`` to ``group`` unless that would make a cycle."""
        outside = {self.step_of[a] for a in node.all_input_nodes if self.group_of.get(a) is not group}
        if self._reaches(outside, group.step):
            return False
        group.members[node] = kind
        group.reads.update(a for a in node.all_input_nodes if a not in group.members)
        self.deps[group.step] |= outside
        self.step_of[node] = group.step
        self.group_of[node] = group
        return True

    def _new_group(self, node: torch.fx.Node, kind: Kind, segment: int, position: int, numel: int) -> Group:
        group = Group(step=len(self.steps), segment=segment, numel=numel)
        self._new_step("group", node, segment, position, group)
        group.members[node] = kind
        group.reads.update(node.all_input_nodes)
        self.group_of[node] = group
        return group

    def _sharing(self, node: torch.fx.Node, segment: int, shape: tuple[int, ...]) -> list[Group]:
        """Groups of this segment whose full values can have ``shape`` and that
        already read one of ``node``'s inputs (horizontal fusion: the read is
        shared), most recent first."""
        found = [
            g
            for g in self._groups(segment)
            if g.numel == math.prod(shape)
            and g.shape in (None, shape)
            and g.reads & set(node.all_input_nodes)
        ]
        return sorted(found, key=lambda g: -g.step)

    def _groups(self, segment: int) -> list[Group]:
        """This segment's groups, most recent first."""
        return [s.group for s in reversed(self.steps) if s.group is not None and s.group.segment == segment]

    def _access(self, operand: torch.fx.Node, group: Group, node: torch.fx.Node, kind: Kind) -> bool:
        """Whether ``node`` (of ``kind`` in ``group``) may read member ``operand`` in place."""
        src, src_kind, dst = _shape(operand), group.members[operand], _shape(node)
        if group.perm is None:
            return access_ok(src, src_kind, dst, kind, group.reduce or 1)
        if src_kind == kind:
            return src == dst
        return src_kind == "row" and _row_broadcast_ok(src, dst, group.reduced)

    def _internal(self, node: torch.fx.Node, segment: int) -> Group | None:
        group = self.group_of.get(node)
        return group if group is not None and group.segment == segment else None

    # -- one node of each category ------------------------------------------
    def _pointwise(self, node: torch.fx.Node, segment: int, position: int) -> None:
        reads = [node.args[i] for i in RULES[node.target].reads if i < len(node.args)]
        operands = [a for a in reads if isinstance(a, torch.fx.Node)]
        candidates: list[Group] = []
        for a in operands:
            g = self._internal(a, segment)
            if g is not None and g not in candidates:
                candidates.append(g)
        for group in sorted(candidates, key=lambda g: -g.step):
            inside = [a for a in operands if self.group_of.get(a) is group]
            any_full = any(group.members[a] == "full" for a in inside)
            if group.perm is not None:
                grows = _shape(node) == group.shape
            else:
                grows = group.rows is not None and _numel(node) == group.numel != group.rows
            kind: Kind = "full" if any_full or grows else "row"
            if kind == "full" and group.shape not in (None, _shape(node)):
                continue
            if _numel(node) != (group.numel if kind == "full" else group.rows):
                continue
            if all(self._access(a, group, node, kind) for a in inside):
                if self._join(node, group, kind):
                    return
        for group in self._sharing(node, segment, _shape(node)):
            inside = [a for a in operands if self.group_of.get(a) is group]
            if group not in candidates and all(self._access(a, group, node, "full") for a in inside):
                if self._join(node, group, "full"):
                    return
        for group in self._groups(segment):  # a per-row value next to a reduction reading the same input
            if group.rows == _numel(node) != group.numel and group.reads & set(node.all_input_nodes):
                inside = [a for a in operands if self.group_of.get(a) is group]
                if all(self._access(a, group, node, "row") for a in inside) and self._join(node, group, "row"):
                    return
        self._new_group(node, "full", segment, position, _numel(node))

    def _reduction(self, node: torch.fx.Node, segment: int, position: int) -> None:
        source = node.args[0]
        shape = _shape(source)  # type: ignore[arg-type]
        dims = reduction_dims(node)
        reduce = math.prod(shape[d] for d in dims)
        trailing = dims == tuple(range(len(shape) - len(dims), len(shape)))
        perm = None if trailing else tuple(d for d in range(len(shape)) if d not in dims) + dims
        rows = _numel(node)
        group = self._internal(source, segment)  # type: ignore[arg-type]
        if group is not None and group.members[source] == "full" and self._fits(group, shape, perm, reduce, rows):  # type: ignore[index]
            if self._join(node, group, "row"):
                self._set_reduction(group, shape, perm, dims, reduce, rows)
                return
        # read from outside: any group already reducing rows of this domain
        # takes it (one launch instead of two, reads shared or not)
        domain = [g for g in self._groups(segment) if g.reduce is not None]
        for shared in [*self._sharing(node, segment, shape), *domain]:
            if shared is not group:
                if self._fits(shared, shape, perm, reduce, rows) and self._join(node, shared, "row"):
                    self._set_reduction(shared, shape, perm, dims, reduce, rows)
                    return
        group = self._new_group(node, "row", segment, position, math.prod(shape))
        self._set_reduction(group, shape, perm, dims, reduce, rows)

    @staticmethod
    def _fits(group: Group, shape: tuple[int, ...], perm: tuple[int, ...] | None, reduce: int, rows: int) -> bool:
        """Whether a reduction of a ``shape`` value (addressed in ``perm``
        order) over ``reduce`` elements per row can join ``group``."""
        if group.numel != math.prod(shape):
            return False
        if group.reduce is not None:
            return (group.reduce, group.rows, group.perm) == (reduce, rows, perm) and (perm is None or group.shape == shape)
        if perm is None:
            return True
        # a pointwise group becomes permuted: every member must be a full value of this very shape
        return all(_shape(n) == shape and n.target in RULES for n in group.members)

    @staticmethod
    def _set_reduction(
        group: Group, shape: tuple[int, ...], perm: tuple[int, ...] | None, dims: tuple[int, ...], reduce: int, rows: int
    ) -> None:
        group.reduce, group.rows = reduce, rows
        if perm is not None:
            group.perm, group.shape, group.reduced = perm, shape, tuple(perm[len(perm) - len(dims) :])

    def _view(self, node: torch.fx.Node, segment: int, position: int) -> None:
        source = node.args[0]
        group = self._internal(source, segment) if isinstance(source, torch.fx.Node) else None
        if (
            group is not None
            and group.perm is None
            and node.target in ORDER_KEEPING_VIEWS
            and _numel(node) == _numel(source)  # type: ignore[arg-type]
            and node.meta["val"].dtype == source.meta["val"].dtype  # type: ignore[union-attr]
            and self._join(node, group, group.members[source])  # type: ignore[index]
        ):
            return
        self._new_step("view", node, segment, position)

    # -- the result -----------------------------------------------------------
    def order(self) -> list[int]:
        """Steps in an order that respects data and segments (Note [Write barriers])."""
        import heapq

        users: list[set[int]] = [set() for _ in self.steps]
        waiting = [len(d - {i}) for i, d in enumerate(self.deps)]
        for i, d in enumerate(self.deps):
            for j in d - {i}:
                users[j].add(i)
        ready = [(self.steps[i].segment, self.steps[i].position, i) for i, w in enumerate(waiting) if w == 0]
        heapq.heapify(ready)
        out: list[int] = []
        while ready:
            _, _, i = heapq.heappop(ready)
            out.append(i)
            for u in users[i]:
                waiting[u] -= 1
                if waiting[u] == 0:
                    heapq.heappush(ready, (self.steps[u].segment, self.steps[u].position, u))
        if len(out) != len(self.steps):
            raise AssertionError("fusion made a cycle in the step graph")
        return out
