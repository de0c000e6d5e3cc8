"""Merging two fusion groups over the same domain (Note [Group merging]).

Note [Group merging]: groups form greedily in graph order, so two groups over
the same elements (a softmax backward's row reduction and a layer norm
backward's, over the same rows) can end up apart when a later node reads from
both. When that node joins one of them, the other one merges in if

* their domains agree: the same number of elements, and the same rows, row
  length and permutation when both reduce (a pointwise group joins a permuted
  one only if all its members have that group's shape and none is a view);
* every read between their members is legal in place in the merged group
  (Note [Linear index]), which values read from memory before never had to be;
* no third step lies on a path between them (that would be a cycle);
* the working copy's ``AliasDb`` lets them meet, and merges them in place
  (``Fuser.fold``, Note [Fusion in the AliasDb] in ``conveyor_triton.record``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

import torch.fx

from conveyor_triton.classify import REDUCTIONS
from conveyor_triton.domain import Kind, shape
from conveyor_triton.ops import RULES, SHIFTED
from conveyor_triton.steps import Group, StepGraph


class Fusing(Protocol):
    """What a merge needs of the fuser (``conveyor_triton.fusion.Fuser``): its public API."""

    graph: StepGraph
    position: dict[torch.fx.Node, int]

    def access(
        self, operand: torch.fx.Node, group: Group, node: torch.fx.Node, kind: Kind, src_kind: Kind | None = None
    ) -> bool: ...
    def read(self, group: Group, values: Iterable[torch.fx.Node]) -> None: ...
    def reducing(self, group: Group) -> None: ...
    def fold(self, other: Group, group: Group) -> bool: ...
    def move(self, node: torch.fx.Node, group: Group) -> None: ...


def _domain(a: Group, b: Group) -> Group | None:
    """The group whose domain the merge keeps, or None if they disagree."""
    if a.numel != b.numel:
        return None
    if a.reduce is not None and b.reduce is not None:
        same = (a.reduce, a.rows, a.perm, a.shape) == (b.reduce, b.rows, b.perm, b.shape)
        return a if same else None
    reducing, plain = (a, b) if a.reduce is not None else (b, a)
    if reducing.perm is not None:
        if any(shape(m) != reducing.shape or m.target not in RULES for m in plain.members):
            return None
    return reducing


def _reads_ok(fuser: Fusing, merged: Group, members: dict[torch.fx.Node, Kind], other: set[torch.fx.Node]) -> bool:
    """Every read across the two old groups is legal in place in ``merged``."""
    for m, kind in members.items():
        if m.target in REDUCTIONS:
            source = m.args[0]
            if (source in other) != (m in other) and members.get(source) != "full":  # type: ignore[arg-type]
                return False
            continue
        if m.target not in RULES:
            continue  # an order-keeping view: its source is in its own old group
        if m.target in SHIFTED and any(a in members and merged.at_index.get(a) is not m for a in m.all_input_nodes):
            return False  # Note [Cat in a group] in conveyor_triton.codegen_cat
        for i in RULES[m.target].reads:
            a = m.args[i] if i < len(m.args) else None
            if isinstance(a, torch.fx.Node) and a in members and (a in other) != (m in other):
                if not fuser.access(a, merged, m, kind, members[a]):
                    return False
    return True


def merge(fuser: Fusing, other: Group, group: Group) -> bool:
    """Merge ``other`` into ``group`` if Note [Group merging] allows it."""
    if other is group or not other.members or not group.members:
        return False
    keep = _domain(group, other)
    if keep is None:
        return False
    so, sg = other.step, group.step
    steps = fuser.graph
    if steps.reaches(steps.deps(sg) - {so}, so) or steps.reaches(steps.deps(so) - {sg}, sg):
        return False  # a third step lies on a path between them
    members = dict(sorted({**group.members, **other.members}.items(), key=lambda m: fuser.position[m[0]]))
    probe = Group(step=-1, numel=keep.numel, members=members, reduce=keep.reduce, rows=keep.rows,
                  perm=keep.perm, shape=keep.shape, reduced=keep.reduced,
                  at_index={**group.at_index, **other.at_index})  # fmt: skip
    if not _reads_ok(fuser, probe, members, set(other.members)):
        return False
    if not fuser.fold(other, group):
        return False  # the working copy's AliasDb refuses (Note [Fusion in the AliasDb])
    was_reducing = group.reduce is not None
    group.members = members
    group.reduce, group.rows, group.perm, group.shape, group.reduced = (
        keep.reduce, keep.rows, keep.perm, keep.shape, keep.reduced,
    )  # fmt: skip
    if group.reduce is not None and not was_reducing:
        fuser.reducing(group)
    fuser.read(group, other.reads)
    group.evaluate_at.update(other.evaluate_at)
    group.at_index.update(other.at_index)
    for m in other.members:
        fuser.move(m, group)
    steps.contract(sg, so)
    other.members.clear()
    other.reads.clear()
    return True
