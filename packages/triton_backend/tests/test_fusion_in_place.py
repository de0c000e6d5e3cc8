"""The fuser's ``AliasDb`` is updated in place at every merge and answers its
memory questions (Note [Fusion in the AliasDb]); the groups are those the fuser
decided before it did.

* On random programs (hypothesis), with the rebuild-and-compare check on, the
  analysis after every group update equals a rebuild of the working copy, the
  fused copy computes what the program does (writes included), and the groups
  equal those of a reference of the earlier decisions: memory order computed
  once over the original graph, every merge the step graph allows taken, no
  analysis touched (``EarlierWorking``).
* On 800 pinned programs the groups equal the ones the fuser decided before
  the change (``data/fusion_groups.json``, captured from the earlier code; the
  programs are stored with them, so a change to ``fusion_programs`` does not
  move them).
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from unittest import mock

import pytest
import torch
import torch.fx
from conveyor_alias_db import ENV_VAR, AliasDb, memory_order
from conveyor_triton import fusion
from conveyor_triton.fusion import Fuser
from fusion_programs import OPS, Steps, fuser_inputs, groups_of, inputs, program, trace
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

PINNED = json.loads((Path(__file__).parent / "data" / "fusion_groups.json").read_text())
CHUNKS = 8


class EarlierWorking:
    """The fuser's decisions before the in-place update: ``memory_order`` once
    over an analysis of the original graph, and no merge refused or recorded."""

    def __init__(
        self,
        graph: torch.fx.Graph,
        input_aliasing: Sequence[Sequence[torch.fx.Node]] | None,
        *,
        writer: Callable[[torch.fx.Node], bool],
        barrier: Callable[[torch.fx.Node], bool],
        **_: object,
    ) -> None:
        db = AliasDb.from_graph(graph, input_aliasing, verify_updates=False)
        body = [n for n in graph.nodes if n.op not in ("placeholder", "output")]
        self.after = memory_order(db, body, writer=writer, barrier=barrier)

    def visit(self, node: torch.fx.Node) -> list[torch.fx.Node]:
        return self.after.get(node, [])

    def place(self, node: torch.fx.Node, step: int) -> None:
        pass

    def create_group(self, node: torch.fx.Node, step: int) -> None:
        pass

    def join(self, node: torch.fx.Node, step: int) -> bool:
        return True

    def fold(self, keep: int, gone: int) -> bool:
        return True


@contextmanager
def verify_every_update() -> Iterator[None]:
    """The rebuild-and-compare check after every update of the analyses built inside."""
    with mock.patch.dict(os.environ, {ENV_VAR: "1"}):
        yield


def fuse(steps: Steps, alias: bool) -> tuple[torch.fx.GraphModule, Fuser]:
    gm = trace(program(steps), inputs(alias))
    classes, aliasing = fuser_inputs(gm)
    return gm, Fuser(gm.graph, classes, aliasing)


def earlier_groups(gm: torch.fx.GraphModule) -> list[list[list[str]]]:
    classes, aliasing = fuser_inputs(gm)
    with mock.patch.object(fusion, "Working", EarlierWorking):
        return groups_of(Fuser(gm.graph, classes, aliasing).steps)


def check_fused_copy(gm: torch.fx.GraphModule, fuser: Fuser, alias: bool) -> None:
    """The working copy, group nodes and all, computes what ``gm`` does."""
    fused = torch.fx.GraphModule(torch.nn.Module(), fuser.working.graph)
    expected_args, fused_args = inputs(alias), inputs(alias)
    torch.testing.assert_close(fused(*fused_args), gm(*expected_args))
    torch.testing.assert_close(fused_args, expected_args)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    steps=st.lists(st.tuples(st.sampled_from(OPS), st.integers(0, 30), st.integers(0, 30)), min_size=1, max_size=16),
    alias=st.booleans(),
)
def test_every_merge_updates_the_analysis_in_place(steps, alias):
    with verify_every_update():
        gm, fuser = fuse(steps, alias)  # raises AliasDbMismatch at the first update that differs
    assert groups_of(fuser.steps) == earlier_groups(gm)
    groups = [s for s in fuser.steps if s.group is not None and s.group.members]
    assert sorted(fuser.group_nodes()) == sorted(s.group.step for s in groups)  # type: ignore[union-attr]
    check_fused_copy(gm, fuser, alias)


def test_memory_order_is_asked_as_nodes_are_reached():
    """What the in-place analysis answers as each node is reached equals
    ``memory_order`` over an analysis of the original graph."""
    gm, fuser = fuse([("add_", 0, 1), ("sin", 0, 0), ("mul_", 1, 0), ("scale", 3, 0), ("add_", 2, 2)], alias=True)
    reference = EarlierWorking(gm.graph, fuser_inputs(gm)[1], writer=fuser._writes, barrier=fuser._barrier)
    assert {n: e for n, e in fuser._after.items() if e} == reference.after


@pytest.mark.parametrize("chunk", [c if c == 0 else pytest.param(c, marks=pytest.mark.slow) for c in range(CHUNKS)])  # CI: one eighth
def test_groups_equal_the_pinned_earlier_groups(chunk):
    keys = sorted(PINNED)[chunk::CHUNKS]
    for key in keys:
        steps, expected = PINNED[key]
        gm, fuser = fuse([tuple(s) for s in steps], alias=key.endswith("-1"))
        assert groups_of(fuser.steps) == expected, key
        fuser.working.alias_db.verify()

# Note [Tests run once in CI]: this module checks machinery that is the same on every torch;
# .ci/run's second torch leaves it out (-m "not once")
pytestmark = pytest.mark.once
