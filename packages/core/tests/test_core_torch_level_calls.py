"""Note [Torch-level calls]: the eager backend calls some overloads through
their torch-level binding; each must dispatch exactly that overload, with the
same result, for every argument form the table allows."""

from __future__ import annotations

from typing import Any

import pytest
import torch
from conveyor.protocol.backends.direct_calls import _torch_level, direct_forward, torch_level_calls
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils._python_dispatch import TorchDispatchMode

aten = torch.ops.aten


def _t(*shape: int) -> torch.Tensor:
    return torch.randn(*shape)


#: overload -> argument forms (args, kwargs) at the table's limits
SAMPLES: dict[Any, list[tuple[tuple[Any, ...], dict[str, Any]]]] = {
    aten.view.default: [((_t(2, 6), [3, 4]), {})],
    aten.expand.default: [((_t(3, 1), [3, 4]), {})],
    aten.t.default: [((_t(2, 3),), {}), ((_t(3),), {})],
    aten.transpose.int: [((_t(2, 3, 4), 0, -1), {})],
    aten.permute.default: [((_t(2, 3, 4), [2, 0, 1]), {})],
    aten.select.int: [((_t(2, 3), 1, -1), {})],
    aten.unsqueeze.default: [((_t(2, 3), 1), {})],
    aten.squeeze.dim: [((_t(2, 1, 3), 1), {})],
    aten.mm.default: [((_t(2, 3), _t(3, 4)), {})],
    aten.bmm.default: [((_t(2, 2, 3), _t(2, 3, 4)), {})],
    aten.clone.default: [((_t(2, 3).t(),), {}), ((_t(2, 3).t(),), {"memory_format": torch.contiguous_format})],
    aten.sum.dim_IntList: [((_t(2, 3), [0]), {}), ((_t(2, 3), [0, 1], True), {"dtype": torch.float64}), ((_t(2, 3), None), {})],
    aten.add.Tensor: [((_t(2, 3), _t(3)), {}), ((_t(2, 3), _t(2, 3)), {"alpha": 2}), ((_t(2, 3), 2.5), {})],
    aten.sub.Tensor: [((_t(2, 3), _t(3)), {"alpha": 3})],
    aten.mul.Tensor: [((_t(2, 3), _t(3)), {}), ((_t(2, 3), 2), {})],
    aten.stack.default: [(([_t(2, 3), _t(2, 3)],), {}), (([_t(2, 3), _t(2, 3).t().t()], 1), {})],
    aten.as_strided.default: [((_t(4, 6), [3, 2], [1, 6]), {}), ((_t(4, 6), [3, 2], [6, 1], 5), {})],
    aten.cat.default: [(([_t(2, 3), _t(1, 3)],), {}), (([_t(2, 3), _t(2, 1)], 1), {})],
    aten.linear.default: [((_t(2, 3), _t(4, 3)), {}), ((_t(5, 2, 3), _t(4, 3), _t(4)), {})],
    aten.addmm.default: [((_t(4), _t(2, 3), _t(3, 4)), {}), ((_t(2, 4), _t(2, 3), _t(3, 4)), {"beta": 0.5, "alpha": 2})],
    aten.native_layer_norm.default: [((_t(2, 3, 4), [4], _t(4), _t(4), 1e-5), {}), ((_t(2, 3, 4), [3, 4], None, None, 1e-6), {})],
    aten.gelu.default: [((_t(2, 3),), {}), ((_t(2, 3),), {"approximate": "tanh"})],
    aten._log_softmax_backward_data.default: [((_t(2, 3), torch.log_softmax(_t(2, 3), 1), 1, torch.float32), {})],
}


class _Recording(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[object] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.calls.append(func)
        return func(*args, **(kwargs or {}))


def test_every_entry_has_samples() -> None:
    assert set(SAMPLES) == set(_torch_level())


@pytest.mark.parametrize("overload", list(SAMPLES), ids=str)
def test_a_binding_dispatches_its_overload_with_the_same_result(overload: Any) -> None:
    binding = _torch_level()[overload][0]
    for args, kwargs in SAMPLES[overload]:
        with _Recording() as by_op:
            expected = overload._op(*args, **kwargs)
        with torch._C.DisableTorchFunction(), _Recording() as by_binding:
            got = binding(*args, **kwargs)
        # a composite overload (linear) reaches a dispatch mode as the ops it is made of: the same ones
        composite = torch._C._dispatch_has_kernel_for_dispatch_key(overload.name(), "CompositeImplicitAutograd")
        assert by_binding.calls == by_op.calls == ([overload] if not composite else by_op.calls)
        assert by_op.calls
        for g, e in zip(*((x,) if isinstance(x, torch.Tensor) else x for x in (got, expected)), strict=True):
            assert torch.equal(g, e) and g.stride() == e.stride()


def test_a_graph_with_other_calls_or_other_argument_forms_keeps_op_calls() -> None:
    def program(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x).t()

    gm = make_fx(program)(_t(2, 2))
    assert set(torch_level_calls(gm.graph)) == {aten.t.default}
    traced = torch.fx.symbolic_trace(program)  # a call that is no OpOverload: nothing bound
    assert torch_level_calls(traced.graph) == {}
    gm = make_fx(lambda x: x.expand(3, 4).t())(_t(3, 1))
    for node in gm.graph.nodes:
        if node.target is aten.expand.default:
            node.args = (*node.args, True)  # implicit, a keyword-only argument of the binding
    assert set(torch_level_calls(gm.graph)) == {aten.t.default}


def test_a_torch_function_mode_sees_no_call_of_the_graph() -> None:
    from torch.overrides import TorchFunctionMode

    class Seen(TorchFunctionMode):
        calls = 0

        def __torch_function__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            Seen.calls += 1
            return func(*args, **(kwargs or {}))

    gm = make_fx(lambda x, w: (x @ w.t()).sum(0) + x.view(-1)[:3])(_t(2, 3), _t(3, 3))
    run = direct_forward(gm)
    assert torch_level_calls(gm.graph)
    x, w = _t(2, 3), _t(3, 3)
    with Seen():
        got = run([x, w])
    assert Seen.calls == 0
    torch.testing.assert_close(got, gm(x, w))
