"""Programs transcribed from PyTorch's tests of compiled autograd and of hooks
under dynamo, run by ``ca_program_harness`` (which says what a program is).

Origin: pytorch/pytorch ``test/inductor/test_compiled_autograd.py``
(``TestCompiledAutograd``: the ``fn`` of each ``check_output_and_recompiles``,
its ``yield``s returned as a list) and ``test/dynamo/test_hooks.py``
(``HooksTests``). Rewritten compactly with smaller sizes; the capture and
compile counts upstream asserts are not checked (conveyor's are its own), the
values, gradients and hook calls are. A ``t.compile`` marks the forward piece
the upstream test compiles (or, for tests that compile nothing, the model).
The programs whose backward is a custom ``autograd.Function``'s are in
:mod:`compiled_autograd_fn_programs`, imported here so that importing this
module registers them too.
"""

from __future__ import annotations

from typing import Any

import compiled_autograd_fn_programs  # noqa: F401  (registers the custom-Function programs)
import torch
from ca_program_harness import Tools, program
from torch import nn

CA = "test/inductor/test_compiled_autograd.py"
HOOKS = "test/dynamo/test_hooks.py"


def _mlp(depth: int = 2, act: type[nn.Module] = nn.ReLU) -> nn.Sequential:
    layers: list[nn.Module] = []
    for _ in range(depth):
        layers += [nn.Linear(4, 4), act()]
    return nn.Sequential(*layers)


def _grads(model: nn.Module) -> list[Any]:
    return [p.grad for p in model.parameters()]


@program(CA)
def p_basic(t: Tools) -> Any:
    model = _mlp()
    t.compile(model)(torch.randn(2, 4)).sum().backward()
    return _grads(model)


@program(CA)
def p_cache_hit(t: Tools) -> Any:
    out = []
    for _ in range(3):
        model = _mlp()
        t.compile(model)(torch.randn(2, 4)).sum().backward()
        out += _grads(model)
    return out


@program(CA)
def p_tensor_grad_hook1(t: Tools) -> Any:
    out = []
    for _ in range(3):
        model = _mlp(1)
        model[0].weight.register_hook(lambda g: (t.log("weight", g), g * 2)[1])
        t.compile(model)(torch.randn(2, 4)).sum().backward()
        out += _grads(model)
    return out


@program(CA)
def p_tensor_grad_hook2(t: Tools) -> Any:
    out = []
    for _ in range(3):
        model = _mlp(1)
        result = t.compile(model)(torch.randn(1, 4)).sum()
        result.grad_fn.register_prehook(lambda gs: (t.log("pre", gs[0]), (gs[0] + 1,))[1])
        result.backward()
        out += _grads(model)
    return out


@program(CA)
def p_tensor_grad_hook3(t: Tools) -> Any:
    out = []
    for _ in range(3):
        model = _mlp(1)
        result = t.compile(model)(torch.randn(1, 4)).sum()
        result.grad_fn.register_hook(lambda gi, go: (t.log("post", gi[0], go[0]), (torch.sin(gi[0]) + go[0],))[1])
        result.backward()
        out += _grads(model)
    return out


@program(CA)
def p_torch_compile_zero_grad(t: Tools) -> Any:
    model = nn.Sequential(nn.Linear(4, 4), nn.Sigmoid())
    opt = t.compile(model)
    out = []
    for _ in range(3):
        opt(torch.randn(1, 4)).sum().backward()
        out += [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
    return out


@program(CA)
def p_implicit_add(t: Tools) -> Any:
    y = torch.randn(1, 4, requires_grad=True)
    f = t.compile(lambda x, y: torch.sigmoid(x * y + torch.sin(y) + torch.cos(y)))
    out = []
    for _ in range(3):
        r = f(torch.randn(1, 4), y).sum()
        r.backward()
        out += [r, y.grad]
        y.grad = None
    return out


@program(CA)
def p_output_nodes_all_leaves(t: Tools) -> Any:
    y, z = torch.randn(1, 4, requires_grad=True), torch.randn(1, 4, requires_grad=True)
    f = t.compile(lambda x, y, z: torch.sigmoid(x * z + torch.sin(y) + torch.cos(y)))
    out = []
    for _ in range(3):
        out += [*torch.autograd.grad(f(torch.randn(1, 4), y, z).sum(), inputs=[y, z]), y.grad, z.grad]
    return out


class _Unreachable(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        raise RuntimeError("this backward must not run")


@program(CA)
def p_output_nodes_some_leaves(t: Tools) -> Any:
    y, z = torch.randn(1, 4, requires_grad=True), torch.randn(1, 4, requires_grad=True)
    f = t.compile(lambda x, y, z: torch.sigmoid(_Unreachable.apply(y) * z * x))
    out = []
    for _ in range(3):
        out += [*torch.autograd.grad(f(torch.randn(1, 4), y, z).sum(), inputs=[z]), y.grad, z.grad]
    return out


@program(CA)
def p_no_output_nodes_some_leaves(t: Tools) -> Any:
    y, z, a = (torch.randn(1, 4, requires_grad=True) for _ in range(3))
    f = t.compile(lambda x, y, z, a: torch.sigmoid(x * y * z * _Unreachable.apply(a)))
    out = []
    for _ in range(3):
        r = f(torch.randn(1, 4), y, z, a).sum().backward(inputs=[y, z])
        out += [r, y.grad, z.grad, a.grad]
        y.grad = z.grad = None
    return out


@program(CA)
def p_no_output_nodes_different_leaves(t: Tools) -> Any:
    x, y, z = (torch.randn(5, requires_grad=True) for _ in range(3))
    f = t.compile(lambda x, y, z: (x * y * z).sum())
    torch.autograd.backward(f(x, y, z), inputs=[x])
    first = x.grad
    x.grad = None
    torch.autograd.backward(f(x, y, z), inputs=[y])
    return [first, x.grad, y.grad, z.grad]


@program(CA)
def p_dynamic_shapes(t: Tools) -> Any:
    model = _mlp()
    opt = t.compile(model)
    out = []
    for b in (10, 20, 30, 40):
        opt(torch.randn(b, 4)).sum().backward()
        out += [p.grad.clone() for p in model.parameters()]
        model.zero_grad()
    return out


@program(CA)
def p_accumulate_without_zero(t: Tools) -> Any:
    model = _mlp()
    opt = t.compile(model)
    out = []
    for _ in range(4):
        opt(torch.randn(10, 4)).sum().backward()
        out += [p.grad.clone() for p in model.parameters()]
    return out


@program(CA)
def p_inplace_grad_update(t: Tools) -> Any:
    model = _mlp(1)
    opt = t.compile(model)
    out = []
    for _ in range(4):
        w, b = torch.rand_like(model[0].weight), torch.rand_like(model[0].bias)
        model[0].weight.grad, model[0].bias.grad = w, b
        opt(torch.randn(10, 4)).sum().backward()
        out += [model[0].weight.grad is w, model[0].bias.grad is b, w.clone(), b.clone()]
    return out


@program(CA)
def p_keep_graph_simple(t: Tools) -> Any:
    x = torch.tensor([2.0], requires_grad=True)
    y = t.compile(lambda x: x**2)(x)
    y.backward(retain_graph=True)
    out = [x.grad.clone()]
    for _ in range(3):
        x.grad = torch.tensor([0.0])
        y.backward(retain_graph=True)
        out.append(x.grad.clone())
    return out


@program(CA)
def p_backward_inside_compiled_fn(t: Tools) -> Any:
    x, y = torch.rand(8, 16), torch.rand(8, 16, requires_grad=True)

    def f(x: torch.Tensor, y: torch.Tensor) -> Any:
        y.grad = None
        out = x + y
        out.sum().backward()
        return out, y.grad

    return t.compile(f)(x, y)


@program(CA)
def p_accumulate_grad_accuracy(t: Tools) -> Any:
    model = nn.Sequential(nn.Linear(2, 1, bias=False), nn.Linear(1, 2, bias=False))
    t.compile(model)(torch.randn(2, 2)).sum().backward()
    return _grads(model)


@program(CA)
def p_sdpa_checkpoint(t: Tools) -> Any:
    def sdpa(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
        return nn.functional.scaled_dot_product_attention(q, k, k, is_causal=True)

    def g(q1: torch.Tensor, k1: torch.Tensor, q2: torch.Tensor, k2: torch.Tensor) -> torch.Tensor:
        y = sdpa(q1, k1) * torch.utils.checkpoint.checkpoint(sdpa, q2, k2, use_reentrant=False)
        return y @ y

    qs = [torch.randn(1, 1, 2, 2, requires_grad=True) for _ in range(2)]
    ks = [torch.randn(1, 1, 4, 2, requires_grad=True) for _ in range(2)]
    out = t.compile(g)(qs[0], ks[0], qs[1], ks[1])
    out.sum().backward()
    return [out, *(x.grad for x in qs + ks)]


@program(CA)
def p_intermediate_hook_closure_object(t: Tools) -> Any:
    val = torch.tensor(88.0)

    def fn(x: torch.Tensor) -> torch.Tensor:
        y = x.sin()
        closure = y + 1
        y.register_hook(lambda g: g + val + closure)
        return y.sin()

    x = torch.ones(4, requires_grad=True)
    out = t.compile(fn)(x)
    out.sum().backward()
    return out, x.grad
