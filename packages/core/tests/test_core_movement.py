"""Note [Movement chains]: the eager backend collapses a chain of views and
copies into one ``as_strided`` (and one copy), with the same values, sizes
and strides, and leaves what it cannot prove alone."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from conveyor.protocol.backends.movement import collapse_movement, restride
from conveyor.protocol.backends.rewriting import rewritten
from torch.fx.experimental.proxy_tensor import make_fx

aten = torch.ops.aten


def _check(fn: Callable[..., Any], *inputs: torch.Tensor) -> torch.fx.GraphModule:
    with torch.no_grad():
        gm = make_fx(fn, tracing_mode="fake")(*inputs)
        new = rewritten(gm, collapse_movement)
        for expected, got in zip(_tuple(gm(*inputs)), _tuple(new(*inputs)), strict=True):
            assert torch.equal(got, expected) and got.stride() == expected.stride() and got.dtype == expected.dtype
    return new


def _tuple(out: Any) -> tuple[Any, ...]:
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


def _targets(gm: torch.fx.GraphModule) -> list[Any]:
    return [n.target for n in gm.graph.nodes if n.op == "call_function"]


def test_an_attention_gradients_two_copies_become_one() -> None:
    def program(g: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        fresh = g * 2  # (batch, heads, seq, dim), made in the graph
        # (batch * heads, seq, dim) -> (seq, batch * heads, dim) -> (seq, batch, heads * dim), as MHA's backward
        copied = fresh.contiguous().reshape(8, 8, 4).transpose(0, 1).reshape(8, 2, 16)
        return copied * w

    g = torch.randn(2, 4, 8, 4).transpose(1, 2).contiguous().transpose(1, 2)
    new = _check(program, g, torch.randn(16))
    assert _targets(new) == [aten.mul.Tensor, restride, aten.mul.Tensor]  # one copy, inside restride
    (call,) = (n for n in new.graph.nodes if n.target is restride)
    assert call.args[5] is True


def test_a_view_chain_of_an_input_reads_its_offset_at_run_time() -> None:
    def program(qkv: torch.Tensor) -> torch.Tensor:
        q = qkv.select(0, 1).view(4, 6, 2).transpose(0, 1).view(2, 3, 4, 2)
        return q * 3

    base = torch.randn(3, 4, 12)
    new = _check(program, base)
    assert _targets(new) == [restride, aten.mul.Tensor]
    shifted = torch.randn(5, 4, 12)[2:]  # the same layout at another offset
    with torch.no_grad():
        assert torch.equal(new(shifted), program(shifted))


def test_what_is_left_alone() -> None:
    x = torch.randn(4, 6)
    # a source laid out otherwise than its fake said: the chain runs as it was
    chain = ((aten.t.default, (), {}), (aten.clone.default, (), {"memory_format": torch.contiguous_format}))
    for source in (x, x.t().contiguous().t()):
        got = restride(source, [6, 4], [1, 6], 0, (6, 1), True, chain)
        assert torch.equal(got, x.t()) and got.is_contiguous()
    # a single view: nothing to gain
    assert _targets(_check(lambda x: x.t() @ x, x)) == [aten.t.default, aten.mm.default]
    # a view chain that is an output keeps its views (the caller may look at its base)
    new = _check(lambda x: x.view(6, 4).t().unsqueeze(0), x)
    assert restride not in _targets(new)
    # a graph that writes
    new = _check(lambda x: x.clone().t().contiguous().view(-1).add_(1), x)
    assert restride not in _targets(new)
    # a copy whose positions are no strided view of its source (a stack merged into a dimension)
    new = _check(lambda a, b: torch.stack([a, b]).transpose(0, 1).reshape(4, 12) * 2, x, x + 1)
    assert restride not in _targets(new)


def test_symbolic_sizes_are_left_alone() -> None:
    with torch.no_grad():
        gm = make_fx(lambda x: x.transpose(0, 1).reshape(-1).view(2, -1) * 2, tracing_mode="symbolic")(torch.randn(4, 6))
    assert rewritten(gm, collapse_movement) is gm


def test_copies_around_a_stack_become_one_stack_along_the_inner_dimension() -> None:
    """Note [Copies around a stack]: an in-projection's q/k/v gradients."""
    from conveyor.protocol.backends.restack import stack_copies

    def program(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
        # (batch, heads, seq, dim) -> (seq, batch, heads * dim) copies, stacked, the stack moved inwards
        parts = [(g * 1.5).permute(2, 0, 1, 3).reshape(8, 2, 16) for g in (q, k, v)]
        stacked = torch.stack(parts).unsqueeze(3).transpose(0, -2).squeeze(0).contiguous()
        return stacked.view(8, 2, 3 * 16) * 2

    q, k, v = (torch.randn(2, 8, 4, 4).transpose(1, 2) for _ in range(3))  # as the attention backward lays them out
    with torch.no_grad():
        gm = make_fx(program, tracing_mode="fake")(q, k, v)
        new = rewritten(gm, collapse_movement, stack_copies)
        expected, got = gm(q, k, v), new(q, k, v)
    assert torch.equal(got, expected) and got.stride() == expected.stride()
    targets = _targets(new)
    assert aten.clone.default not in targets and aten.squeeze.dim not in targets
    assert all(n.args[5] is False for n in new.graph.nodes if n.target is restride)  # the stack copies
    (stack,) = (n for n in new.graph.nodes if n.target is aten.stack.default)
    assert stack.args[1] == 2


def test_a_sum_that_keeps_a_dimension_a_view_drops_is_one_sum() -> None:
    """Note [Kept dimensions]."""
    from conveyor.protocol.backends.fold_views import keepdim_views

    def program(g: torch.Tensor) -> tuple[torch.Tensor, ...]:
        kept = g.sum([0], True)
        return g.sum([0], True).view(6), g.sum([0, 1], True).view(1, 1), kept.view(6), kept * 2

    g = torch.randn(4, 6)
    with torch.no_grad():
        gm = make_fx(program, tracing_mode="fake")(g)
        new = rewritten(gm, keepdim_views)
        for expected, got in zip(gm(g), new(g), strict=True):
            assert torch.equal(got, expected) and got.stride() == expected.stride()
    views = [n for n in new.graph.nodes if n.target is aten.view.default]
    assert len(views) == 2  # the second view keeps a dimension; the third view's sum has another reader


def test_a_collapsed_graph_is_stored_and_loaded() -> None:
    """The disk cache stores the eager backend's run as its graph, which FX
    rebuilds by tracing the graph's code: ``restride`` records itself."""
    from conveyor.protocol.artifacts import dumps, loads
    from conveyor.protocol.backends.eager import _running

    def program(qkv: torch.Tensor) -> torch.Tensor:
        return qkv.select(0, 1).view(4, 6, 2).transpose(0, 1).view(2, 3, 4, 2) * 3

    x = torch.randn(3, 4, 12)
    with torch.no_grad():
        gm = rewritten(make_fx(program, tracing_mode="fake")(x), collapse_movement)
        assert restride in _targets(gm)
        run = loads(dumps(_running(gm)))
        assert torch.equal(run([x]), program(x))


def test_a_chain_that_changes_the_element_count_is_no_restack() -> None:
    """A slice then an expand between a stack and its copy (transformers'
    Mamba under a compile) made the restack check view 48 positions as the
    24-element stack and raise; such a chain is no view of the stack."""
    from conveyor.protocol.backends.restack import _restack
    from torch.fx.experimental.proxy_tensor import make_fx

    def g(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        return torch.stack([a, b, c])[1:].unsqueeze(0).expand(3, 2, 4, 2).clone()

    gm = make_fx(g, tracing_mode="fake")(*(torch.randn(4, 2) for _ in range(3)))
    stack, *chain = [n for n in gm.graph.nodes if n.op == "call_function"]
    assert _restack(chain, stack) is None
