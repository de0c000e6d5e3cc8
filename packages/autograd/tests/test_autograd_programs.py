"""Small programs through the checker with both partitioners: values, aliasing,
requires_grad of every output and gradients against eager."""

from __future__ import annotations

import conveyor
import pytest
import torch
import torch.nn.functional as F
from autograd_helpers import labels
from conveyor.testing import check
from torch import nn


def pointwise_chain(x, y):
    return ((x.sin() * y).exp() + x.cos()).tanh()


def matmul_relu(x, w, b):
    return torch.relu(x @ w + b).sum(-1)


def several_outputs(x, y):
    z = x * y
    return z, z.sum(), (x > 0), x.argmax(), y.detach() * 2


def int_and_bool_inputs(x, idx, mask):
    return x[idx] * 2, torch.where(mask, x, -x)


def unused_input(x, y):
    return x * 3


def output_needs_no_grad(x, y):
    return x * 2, y + 1


def no_grad_region(x, w):
    with torch.no_grad():
        scale = (x * w).sum()
    return x * scale + w


def views_and_reductions(x):
    t = x.t().contiguous()
    return t[1:].softmax(-1), x.view(-1).cumsum(0)


def layer_norm_gelu(x, w, b):
    return torch.nn.functional.gelu(torch.nn.functional.layer_norm(x, (8,), w, b))


def returns_input_view(x):
    return x.view(-1), x * 2


def shared_subexpression(x):
    a = x.sigmoid()
    return a * a, a.sum()


def r(*shape, grad=True, dtype=torch.float64):
    return torch.randn(*shape, dtype=dtype).requires_grad_(grad)


CASES = {
    "pointwise_chain": (pointwise_chain, lambda: (r(4, 5), r(4, 5))),
    "matmul_relu": (matmul_relu, lambda: (r(3, 4), r(4, 6), r(6))),
    "several_outputs": (several_outputs, lambda: (r(3, 4), r(3, 4))),
    "int_and_bool_inputs": (
        int_and_bool_inputs,
        lambda: (r(5, 3), torch.tensor([0, 2, 2, 4]), torch.rand(5, 3) > 0.5),
    ),
    "unused_input": (unused_input, lambda: (r(3), r(3))),
    "output_needs_no_grad": (output_needs_no_grad, lambda: (r(3), r(3, grad=False))),
    "no_grad_region": (no_grad_region, lambda: (r(3, 4), r(3, 4))),
    "views_and_reductions": (views_and_reductions, lambda: (r(4, 6),)),
    "layer_norm_gelu": (layer_norm_gelu, lambda: (r(2, 3, 8), r(8), r(8))),
    "returns_input_view": (returns_input_view, lambda: (r(2, 3),)),
    "shared_subexpression": (shared_subexpression, lambda: (r(4, 4),)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_program(name: str, compile_with) -> None:
    fn, make = CASES[name]
    torch.manual_seed(0)
    checked = check(fn, *make(), compile=compile_with)
    assert labels(checked.compiled) == ["forward", "backward"]


def test_float32_module_parameters(compile_with) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    checked = check(model, torch.randn(5, 6), compile=compile_with, atol=1e-5, rtol=1e-5)
    assert labels(checked.compiled) == ["forward", "backward"]


def test_no_grad_call_is_an_inference_graph(compile_with) -> None:
    x = r(3, 4)
    compiled = compile_with(pointwise_chain)
    with torch.no_grad():
        out = compiled(x, x * 2)
    assert not out.requires_grad
    assert labels(compiled) == ["forward"]
    torch.testing.assert_close(out, pointwise_chain(x, x * 2).detach())


def test_no_input_requires_grad_passes_through(compile_with) -> None:
    compiled = compile_with(pointwise_chain)
    check(pointwise_chain, r(3, grad=False), r(3, grad=False), compile=compile_with)
    compiled(r(3, grad=False), r(3, grad=False))
    assert labels(compiled) == ["forward"]


def test_only_detached_outputs_pass_through(compile_with) -> None:
    compiled = compile_with(lambda x: (x.detach() * 2, x.argmax()))
    out, idx = compiled(r(4))
    assert not out.requires_grad and labels(compiled) == ["forward"]


def test_backward_graph_is_introspectable(compile_with) -> None:
    compiled = compile_with(matmul_relu)
    compiled(*CASES["matmul_relu"][1]())
    stamped = [(g.stage, g.label) for g in conveyor.last_graphs(compiled)]
    assert ("autograd", "backward") in stamped and ("eager", "backward") in stamped
    (backward,) = [g.graph for g in conveyor.last_graphs(compiled) if (g.stage, g.label) == ("eager", "backward")]
    assert any("mm" in str(n.target) for n in backward.graph.nodes)


def test_grad_of_some_inputs_only(compile_with) -> None:
    x, w, b = r(3, 4), r(4, 6, grad=False), r(6)
    check(matmul_relu, x, w, b, compile=compile_with)


def test_outputs_viewing_intermediates_can_be_changed_in_place(compile_with) -> None:
    def f(x):
        return (x * 2).view(-1), (x * 3).t()

    x = torch.randn(3, 4, requires_grad=True)
    grads = []
    for fn in (f, compile_with(f)):
        a, b = fn(x)
        a.add_(1)
        b.mul_(2)
        (a.sum() + b.sum()).backward()
        grads.append(x.grad)
        x.grad = None
    torch.testing.assert_close(grads[1], grads[0])


def test_rrelu_in_training_differentiates_the_noise_it_drew(compile_with) -> None:
    """Note [Functional ops whose formula reads a written argument]: torch's formula
    for ``rrelu_with_noise_functional`` reads the noise buffer before the draw
    (uninitialized): the gradient was garbage (cpu repro sweep)."""
    check(lambda x: F.rrelu(x * 2, training=True), r(4, 8), compile=compile_with)
    check(nn.RReLU(0.1, 0.3).train(), r(2, 16), compile=compile_with)
    check(lambda x: F.rrelu(x, training=False), r(4, 8), compile=compile_with)
