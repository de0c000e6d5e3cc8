"""The joint trace hides the caller's saved-tensor hooks without tracing a
detach per saved tensor (Note [Saved-tensor hooks while tracing]);
save_eager saves the source of autograd's detach of a saved output (Note
[Detaches of saved outputs]); the backward graph leaves inert detaches out
(Note [Detaches in the backward graph])."""

from __future__ import annotations

import pytest
import torch
from autograd_helpers import pipeline
from conveyor import Request, retrace
from conveyor.analysis import saved_hooks
from conveyor.testing import check
from conveyor_autograd import save_eager, split, trace_joint
from conveyor_autograd.measure import saved_for_backward
from conveyor_autograd.partition import ancestors
from torch._subclasses.fake_tensor import FakeTensorMode

DETACH = torch.ops.aten.detach.default


def net(x, w):
    h = torch.relu(x @ w)
    return (torch.sigmoid(h) * x.sum()).sum(-1)


def request_for(fn, *shapes) -> Request:
    mode = FakeTensorMode()
    fakes = tuple(mode.from_tensor(torch.randn(s, requires_grad=True)) for s in shapes)
    return Request(retrace(fn, fakes, mode), fakes, mode)


def detaches(gm: torch.fx.GraphModule) -> int:
    return sum(1 for n in gm.graph.nodes if n.target is DETACH)


@pytest.fixture(params=["switch", "identity hooks"])
def hiding(request, monkeypatch):
    """Both ways of hiding the caller's hooks: torch's tracing switch, and the
    identity hooks used where the switch is missing."""
    if request.param == "switch":
        if saved_hooks._set_tracing() is None:
            pytest.skip("this torch has no working saved-tensor hooks tracing switch")
    else:
        monkeypatch.setattr(saved_hooks, "_set_tracing", lambda: None)
    return request.param


def test_the_probe_finds_the_switch_where_torch_has_it() -> None:
    if hasattr(torch._C._autograd, "_saved_tensors_hooks_set_tracing"):
        assert saved_hooks._set_tracing() is not None
    # and it left the switch off
    seen = []
    x = torch.ones(2, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(lambda t: seen.append(t) or t, lambda t: t):
        x.sin()
    assert len(seen) == 1


def test_the_callers_hooks_do_not_see_the_joint_trace(hiding) -> None:
    packed: list[type] = []

    def pack(t):
        packed.append(type(t))
        return t

    request = request_for(lambda x, w: (net(x, w),), (4, 8), (8, 6))
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        assert trace_joint(request) is not None
        torch.ones(1, requires_grad=True).sin()  # the caller's hook is back after the trace
    assert packed == [torch.Tensor]
    check(net, torch.randn(4, 8, requires_grad=True), torch.randn(8, 6, requires_grad=True), compile=pipeline("save_eager"))


def test_with_the_switch_the_backward_reads_saved_values_without_a_detach(hiding) -> None:
    joint = trace_joint(request_for(lambda x, w: (net(x, w),), (4, 8), (8, 6)))
    assert joint is not None
    if hiding == "switch":
        # only autograd's detach of each saved output (relu, sigmoid), at save and at unpack
        live = ancestors([*joint.outputs, *joint.grads])
        assert sum(1 for n in live if n.target is DETACH) == 4
    parts = split(joint, save_eager(joint))
    assert DETACH not in {n.target for n in parts.saved}  # Note [Detaches of saved outputs]
    assert detaches(parts.backward) == 0  # Note [Detaches in the backward graph]
    assert detaches(parts.forward) == 0


def test_save_eager_still_keeps_what_eager_keeps(hiding) -> None:
    x, w = torch.randn(16, 32, requires_grad=True), torch.randn(32, 24, requires_grad=True)
    eager = saved_for_backward(lambda: net(x, w), exclude=[x, w])[1]
    compiled = pipeline("save_eager")(net)
    compiled(x, w)
    ours = saved_for_backward(lambda: compiled(x, w), exclude=[x, w])[1]
    assert ours.bytes_besides == eager.bytes_besides


def test_a_detach_the_program_returns_stays() -> None:
    def f(x):
        y = torch.relu(x)
        return y.detach(), y.sigmoid()

    check(f, torch.randn(5, requires_grad=True), compile=pipeline("save_eager"))
    check(f, torch.randn(5, requires_grad=True), compile=pipeline("min_cut"))


def test_the_forward_request_takes_the_inputs_detached() -> None:
    """Note [The primals again]: the joint trace's leaves, grad off."""
    from conveyor_autograd.stage import Autograd

    request = request_for(lambda x, w: (net(x, w),), (4, 8), (8, 6))
    lowering = Autograd().lower(request, {"partitioner": "save_eager"})
    forward, backward = lowering.requests
    for given, taken in zip(request.inputs, forward.inputs, strict=True):
        assert taken is not given and taken.is_leaf and not taken.requires_grad
        assert given.requires_grad  # the request's own are left as they were
        assert taken.untyped_storage()._cdata == given.untyped_storage()._cdata
        assert (taken.shape, taken.stride(), taken.dtype) == (given.shape, given.stride(), given.dtype)
        assert taken._version == given._version
    assert all(not t.requires_grad for t in backward.inputs)


def test_a_dead_random_op_of_the_forward_still_runs() -> None:
    """Note [Dead nodes of the joint graph]: the forward keeps a random op
    nobody reads (it advances the RNG, as in eager)."""

    def f(x):
        torch.rand(3)
        return (x.sin(),)

    joint = trace_joint(request_for(f, (3,)))
    assert joint is not None
    parts = split(joint, save_eager(joint))
    assert any(n.target is torch.ops.aten.rand.default for n in parts.forward.graph.nodes)
