"""Note [One copy for the rewrites]: the eager backend's rewrites share one
copy of the graph, made only when one has something to change, and leave
the graph they were given as it was."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch
from conveyor.protocol.backends.fold_views import fold_transpose_pairs, keepdim_views, linear_calls
from conveyor.protocol.backends.movement import collapse_movement
from conveyor.protocol.backends.restack import stack_copies
from conveyor.protocol.backends.rewriting import rewritten
from torch.fx.experimental.proxy_tensor import make_fx

_ALL = (fold_transpose_pairs, linear_calls, keepdim_views, collapse_movement, stack_copies)


@pytest.fixture
def copies(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[torch.fx.Graph]]:
    """The graphs deep-copied while the test runs."""
    made: list[torch.fx.Graph] = []
    deepcopy = torch.fx.Graph.__deepcopy__

    def counted(self: torch.fx.Graph, memo: dict[int, object] | None = None) -> torch.fx.Graph:
        made.append(self)
        return deepcopy(self, memo)

    monkeypatch.setattr(torch.fx.Graph, "__deepcopy__", counted)
    yield made


def _program(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    moved = (x * 2).view(4, 6).t()  # a movement chain
    return torch.nn.functional.linear(moved, w, b).sum([0], True).view(5)  # linear, kept dimension


def test_rewrites_that_fire_share_one_copy_and_leave_the_graph_given(copies: list[torch.fx.Graph]) -> None:
    x, w, b = torch.randn(6, 4), torch.randn(5, 4), torch.randn(5)
    with torch.no_grad():
        gm = make_fx(_program, tracing_mode="fake")(x, w, b)
        before = gm.code
        new = rewritten(gm, *_ALL)
        assert len(copies) == 1 and copies[0] is gm.graph
        assert gm.code == before and new is not gm
        targets = [n.target for n in new.graph.nodes if n.op == "call_function"]
        assert torch.ops.aten.linear.default in targets and torch.ops.aten.view.default not in targets
        assert torch.equal(new(x, w, b), gm(x, w, b))
        # the graph is the one a copy per rewrite gave, node for node
        one_by_one = gm
        for rewrite in _ALL:
            one_by_one = rewritten(one_by_one, rewrite)
        assert one_by_one.code == new.code


def test_no_copy_when_nothing_changes(copies: list[torch.fx.Graph]) -> None:
    gm = make_fx(lambda x: (x * 2).relu())(torch.randn(3))
    assert rewritten(gm, *_ALL) is gm
    assert not copies
