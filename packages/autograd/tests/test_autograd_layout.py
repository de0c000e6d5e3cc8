"""The layout between the forward and backward graphs, and the split itself."""

from __future__ import annotations

import pytest
import torch
from conveyor import Request, retrace
from conveyor_autograd import AutogradLayout, InputIdx, OutputIdx, min_cut, save_eager, split, trace_joint
from conveyor_autograd.ops import is_view
from torch._subclasses.fake_tensor import FakeTensorMode


def layout(**changes) -> AutogradLayout:
    base = dict(
        num_inputs=3,
        num_outputs=2,
        grad_inputs=(InputIdx(0), InputIdx(2)),
        diff_outputs=(OutputIdx(0),),
        non_differentiable=(OutputIdx(1),),
        num_saved_tensors=2,
        num_saved_symbols=1,
    )
    return AutogradLayout(**{**base, **changes})


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"grad_inputs": (InputIdx(0), InputIdx(0))}, "duplicates"),
        ({"grad_inputs": (InputIdx(3),)}, "out of range"),
        ({"non_differentiable": (OutputIdx(0),)}, "both differentiable and not"),
        ({"diff_outputs": ()}, "no differentiable output"),
    ],
)
def test_layout_invariants(changes, message) -> None:
    with pytest.raises(ValueError, match=message):
        layout(**changes)


def test_layout_positions() -> None:
    lay = layout()
    user, tensors, symbols = lay.split_forward_outputs(["o0", "o1", "t0", "t1", "s0"])
    assert (list(user), list(tensors), list(symbols)) == (["o0", "o1"], ["t0", "t1"], ["s0"])
    assert lay.backward_args(tensors, symbols, ["g0", "g1"]) == ["t0", "t1", "s0", "g0"]
    assert lay.input_grads(["d0", "d2"]) == ["d0", None, "d2"]


def request_for(fn, *shapes) -> Request:
    mode = FakeTensorMode()
    fakes = tuple(mode.from_tensor(torch.randn(s, requires_grad=True)) for s in shapes)
    return Request(retrace(fn, fakes, mode), fakes, mode)


def gelu_chain(x, w):
    h = x @ w
    return ((h * 0.5 * (1 + torch.tanh(h * 0.79788456 * (1 + 0.044715 * h * h)))).sum(-1),)


@pytest.mark.parametrize("partitioner", [min_cut, save_eager])
def test_split_conventions(partitioner) -> None:
    joint = trace_joint(request_for(gelu_chain, (4, 8), (8, 16)))
    assert joint is not None
    parts = split(joint, partitioner(joint))
    fwd_out = parts.forward.graph.output_node().args[0]
    bwd_in = [n for n in parts.backward.graph.nodes if n.op == "placeholder"]
    assert len(fwd_out) == parts.layout.num_outputs + parts.layout.num_saved
    assert len(bwd_in) == parts.layout.num_saved + len(parts.layout.diff_outputs)
    assert len(parts.backward.graph.output_node().args[0]) == len(parts.layout.grad_inputs) == 2
    assert not any(is_view(n) for n in parts.saved if n.op == "call_function")


def test_min_cut_saves_less_than_eager_on_a_pointwise_chain() -> None:
    joint = trace_joint(request_for(gelu_chain, (4, 8), (8, 16)))
    assert joint is not None

    def nbytes(nodes) -> int:
        return sum(n.meta["val"].numel() * n.meta["val"].element_size() for n in nodes)

    cut, eager = min_cut(joint), save_eager(joint)
    assert nbytes(cut) < nbytes(eager)
    assert {n.name for n in cut} <= {n.name for n in joint.gm.graph.nodes}


def test_nothing_to_differentiate() -> None:
    assert trace_joint(request_for(lambda x: (x.detach() * 2,), (3,))) is None
