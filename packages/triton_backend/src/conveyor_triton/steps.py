"""The step graph of the fuser: fusion groups while they form, and the steps
they must run after.

A *step* is one unit of the run-time program: a fusion group, an aten view, an
aten call (fallback), or a graph input. A step depends on the steps that
produce what it reads and on those it must follow in memory (Note [Write order]
in ``conveyor_triton.fusion``). :class:`StepGraph` owns these dependencies; the
fuser and the group merge ask it and change it only through its methods.

Note [Step ranks]
~~~~~~~~~~~~~~~~~
Whether a node may join a group is a reachability question (would the group
depend on a step that depends on it?). The step graph keeps a topological
numbering of its steps (``rank``: every step ranks above the steps it depends
on), so a search for a path down to a step never looks below that step's rank:
it only visits the steps between the two, as a search over a graph kept in
program order would (TorchScript's fusers ask their ``AliasDb`` in the same
way). When a step gains a dependency on a step ranked above it (a group takes
a node whose inputs were computed after the group started), the ranks of the
steps in between are reassigned as Pearce and Kelly's dynamic topological
order does (ACM JEA 2006): the new dependency's ancestors above the group move
below the group's descendants under it, in the same ranks. Each update and
each search costs the number of steps between the two ends, not the size of
the graph.

The memory order edges come from the fuser's ``AliasDb`` as each node is
reached; the step graph keeps them only because a cycle may pass through them
(Note [Fusion in the AliasDb] in ``conveyor_triton.record``: the analysis
answers whether work may move past work, the step graph whether a merge closes
a cycle).
"""

from __future__ import annotations

import heapq
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Literal

import torch.fx

from conveyor_triton.domain import Kind


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
    :ivar evaluate_at: absorbed producers computed at their user's (larger)
        shape, their loads broadcast to it (Note [Absorbed producers]).
    :ivar reads: the values its members read (members' own values included).
    :ivar at_index: absorbed index producers, each recomputed by the index
        read using it at that read's index coordinates (Note [Index producers]
        in ``conveyor_triton.index_reads``).
    """

    step: int
    numel: int
    members: dict[torch.fx.Node, Kind] = field(default_factory=dict)
    reduce: int | None = None
    rows: int | None = None
    perm: tuple[int, ...] | None = None
    shape: tuple[int, ...] | None = None
    reduced: tuple[int, ...] = ()
    evaluate_at: dict[torch.fx.Node, tuple[int, ...]] = field(default_factory=dict)
    reads: set[torch.fx.Node] = field(default_factory=set)
    at_index: dict[torch.fx.Node, torch.fx.Node] = field(default_factory=dict)

    def domain(self) -> tuple[object, ...] | None:
        """What a reduction must agree on to join this reducing group (None: it reduces nothing)."""
        if self.reduce is None:
            return None
        return (self.numel, self.reduce, self.rows, self.perm, self.shape if self.perm is not None else None)


@dataclass(frozen=True)
class Step:
    """One unit of the run-time program: a fusion group, an aten view, an aten
    call (fallback), or a graph input."""

    kind: Literal["input", "group", "view", "aten"]
    node: torch.fx.Node | None
    group: Group | None
    position: int


class StepGraph:
    """Steps and their dependencies, kept in a topological numbering (Note [Step ranks])."""

    def __init__(self) -> None:
        self.steps: list[Step] = []
        self._deps: list[set[int]] = []
        self._users: list[set[int]] = []
        self._rank: list[int] = []

    def __len__(self) -> int:
        return len(self.steps)

    def add(self, step: Step, deps: Iterable[int]) -> int:
        """Append ``step``, which depends on the existing steps ``deps``; return its index."""
        index = len(self.steps)
        self.steps.append(step)
        self._deps.append(set())
        self._users.append(set())
        self._rank.append(index)
        self._link(index, set(deps))
        return index

    def deps(self, step: int) -> frozenset[int]:
        """The steps ``step`` depends on directly."""
        return frozenset(self._deps[step])

    def users(self, step: int) -> frozenset[int]:
        """The steps that depend on ``step`` directly."""
        return frozenset(self._users[step])

    def reaches(self, start: Iterable[int], target: int) -> bool:
        """Whether ``target`` is one of ``start`` or a step they depend on, directly or not."""
        return self.ancestors(start).include(target)

    def ancestors(self, start: Iterable[int]) -> Ancestors:
        """``start`` and the steps they depend on, explored as far down as asked
        (valid until the graph changes)."""
        return Ancestors(self._rank, self._deps, start)

    def depend(self, step: int, deps: Iterable[int]) -> None:
        """Make ``step`` depend on ``deps`` too (the caller checked that ``step``
        reaches none of them: no cycle)."""
        self._link(step, set(deps) - {step})

    def contract(self, keep: int, gone: int) -> None:
        """Fold step ``gone`` into ``keep``: ``keep`` depends on what ``gone``
        depended on, and what depended on ``gone`` depends on ``keep`` (the caller
        checked that no third step lies on a path between them)."""
        deps, users = self._deps[gone] - {keep}, self._users[gone] - {keep}
        self._unlink(gone)
        self._link(keep, deps)
        for user in users:
            self._link(user, {keep})

    def order(self) -> list[int]:
        """Steps in program order as far as their dependencies allow (ties by position)."""
        waiting = [len(d) for d in self._deps]
        ready = [(s.position, i) for i, (s, w) in enumerate(zip(self.steps, waiting, strict=True)) if w == 0]
        heapq.heapify(ready)
        out: list[int] = []
        while ready:
            _, i = heapq.heappop(ready)
            out.append(i)
            for u in self._users[i]:
                waiting[u] -= 1
                if waiting[u] == 0:
                    heapq.heappush(ready, (self.steps[u].position, u))
        if len(out) != len(self.steps):
            raise AssertionError("fusion made a cycle in the step graph")
        return out

    # -- the numbering ------------------------------------------------------
    def _unlink(self, step: int) -> None:
        for d in self._deps[step]:
            self._users[d].discard(step)
        for u in self._users[step]:
            self._deps[u].discard(step)
        self._deps[step] = set()
        self._users[step] = set()

    def _link(self, step: int, deps: set[int]) -> None:
        new = deps - self._deps[step]
        if not new:
            return
        self._deps[step] |= new
        for d in new:
            self._users[d].add(step)
        top = max(self._rank[d] for d in new)
        if top > self._rank[step]:
            self._reorder(step, new, top)

    def _reorder(self, step: int, new: set[int], top: int) -> None:
        """Pearce-Kelly: ``step`` now depends on ``new``, the highest ranked ``top``."""
        rank = self._rank
        floor = rank[step]
        below = _search(step, self._users, rank, lambda r: r <= top)  # step and what depends on it
        above = _search_many(new, self._deps, rank, lambda r: r > floor)  # new and what they depend on
        if below & above:
            raise AssertionError("fusion made a cycle in the step graph")
        moved = sorted(above, key=rank.__getitem__) + sorted(below, key=rank.__getitem__)
        for i, r in zip(moved, sorted(rank[s] for s in moved), strict=True):
            rank[i] = r


class Ancestors:
    """Steps ``start`` depends on, explored from the top rank down: asking about
    several targets explores the steps above the lowest one once."""

    def __init__(self, rank: list[int], deps: list[set[int]], start: Iterable[int]) -> None:
        """:param rank: the step graph's ranks and ``deps`` its dependencies (read, never written)."""
        self._rank = rank
        self._deps = deps
        self._heap = [(-self._rank[s], s) for s in set(start)]
        heapq.heapify(self._heap)
        self._seen: set[int] = set()

    def include(self, target: int) -> bool:
        """Whether ``target`` is one of the steps."""
        floor, rank, heap, seen = self._rank[target], self._rank, self._heap, self._seen
        while heap and -heap[0][0] >= floor:
            _, s = heapq.heappop(heap)
            if s not in seen:
                seen.add(s)
                for d in self._deps[s]:
                    if d not in seen:
                        heapq.heappush(heap, (-rank[d], d))
        return target in seen


def _search(start: int, edges: list[set[int]], rank: list[int], keep) -> set[int]:
    return _search_many({start}, edges, rank, keep)


def _search_many(start: Iterable[int], edges: list[set[int]], rank: list[int], keep) -> set[int]:
    """The steps reachable from ``start`` along ``edges`` through steps whose rank passes ``keep``."""
    found: set[int] = set()
    stack = [s for s in start if keep(rank[s])]
    while stack:
        s = stack.pop()
        if s in found:
            continue
        found.add(s)
        stack.extend(e for e in edges[s] if e not in found and keep(rank[e]))
    return found
