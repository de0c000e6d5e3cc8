"""Where an index read's index producer goes: recomputed in the reading
group (Note [Index producers] in ``conveyor_triton.index_reads``), through
the fuser's public API (``conveyor_triton.fusion.Fuser``)."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

import torch
import torch.fx

from conveyor_triton.index_reads import INDEX_READS, index_read
from conveyor_triton.record import Working
from conveyor_triton.steps import Group, Step, StepGraph


class IndexFusing(Protocol):
    """What moving an index producer needs of the fuser."""

    graph: StepGraph
    group_of: dict[torch.fx.Node, Group]
    step_of: dict[torch.fx.Node, int]
    position: dict[torch.fx.Node, int]
    working: Working
    writes_memory: bool

    @property
    def steps(self) -> list[Step]: ...
    def loose(self, operand: torch.fx.Node, user: torch.fx.Node) -> bool: ...
    def fold(self, other: Group, group: Group) -> bool: ...
    def move(self, node: torch.fx.Node, group: Group) -> None: ...
    def read(self, group: Group, values: Iterable[torch.fx.Node]) -> None: ...


def absorb_index(fuser: IndexFusing, node: torch.fx.Node, group: Group) -> None:
    """Move the producer of index read ``node``'s index (and an ``expand``
    view between them) into ``group`` when it is itself an index read used
    only there (Note [Index producers])."""
    producer = index_read(node).index
    view = _broadcast_view(fuser, producer, node)
    if view is not None:
        producer = view.args[0]  # type: ignore[assignment]
    if producer.target not in INDEX_READS or not fuser.loose(producer, view or node):
        return
    if set(producer.all_input_nodes) & set(group.members):
        return  # recomputed at other coordinates: it reads memory only
    alone = fuser.group_of[producer]
    steps = fuser.graph
    between = {group.step} if view is None else {fuser.step_of[view]}
    if steps.reaches(steps.deps(alone.step), group.step) or steps.users(alone.step) - between:
        return
    # the view first joins the producer in the working copy; should the fold then be refused,
    # the copy keeps it there, which a graph writing no memory never asks about again
    if view is not None and not fuser.working.join(view, alone.step):
        return
    if not fuser.fold(alone, group):
        return
    if view is not None:
        steps.contract(alone.step, fuser.step_of[view])
    steps.contract(group.step, alone.step)
    alone.members.clear()
    alone.reads.clear()
    group.members[producer] = group.members[node]
    group.at_index[producer] = view or node
    if view is not None:
        group.members[view] = group.members[node]
        group.at_index[view] = node
        fuser.move(view, group)
    group.members = dict(sorted(group.members.items(), key=lambda m: fuser.position[m[0]]))
    fuser.read(group, producer.all_input_nodes)
    fuser.move(producer, group)


def _broadcast_view(fuser: IndexFusing, index: torch.fx.Node, node: torch.fx.Node) -> torch.fx.Node | None:
    """``index`` when it is an ``expand`` view step of another node, read
    only by index read ``node``, in a graph that writes no memory (Note
    [Index producers]); else None."""
    if index.target is not torch.ops.aten.expand.default or list(index.users) != [node] or fuser.writes_memory:
        return None
    step = fuser.step_of.get(index)
    source = index.args[0]
    if step is None or fuser.steps[step].kind != "view" or not isinstance(source, torch.fx.Node):
        return None
    return index if fuser.graph.deps(step) == {fuser.step_of[source]} else None
