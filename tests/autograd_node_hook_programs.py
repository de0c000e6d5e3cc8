"""Programs transcribed from the node-hook sections of PyTorch's autograd tests
(``test/test_autograd.py``, ``TestAutograd``): ``grad_fn`` pre and post hooks
(removed, on several outputs, registered while unpacking a saved tensor),
post-accumulate-grad hooks, and the order of tensor, node and
accumulate-grad hooks. Registered by :mod:`autograd_hook_programs` (which
imports this module), run by ``ca_program_harness``; as there, the forward
piece goes through ``t.compile`` and every hook logs what it saw.
"""

from __future__ import annotations

from typing import Any

import torch
from ca_program_harness import Tools, program
from torch import nn

AG = "test/test_autograd.py"


def _mul2(custom: bool) -> Any:
    class Mul2(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            return x * 2

        @staticmethod
        def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
            return g * 2

    return (lambda x: Mul2.apply(x)) if custom else (lambda x: x * 2)


def _grad_fn_prehooks(t: Tools, custom: bool) -> Any:
    a = torch.tensor([1.0], requires_grad=True)
    b = t.compile(_mul2(custom))(a)
    b.grad_fn.register_hook(lambda gi, go: (t.log("post", gi[0], go[0]), gi)[1])
    b.grad_fn.register_hook(lambda gi, go: (t.log("post", gi[0], go[0]), gi)[1])
    b.grad_fn.register_prehook(lambda go: (t.log("pre", go[0]), (go[0] * 2,))[1])
    b.grad_fn.register_prehook(lambda go: None)
    b.grad_fn.register_prehook(lambda go: (t.log("pre", go[0]), (go[0] * 2,))[1])
    b.grad_fn.register_prehook(lambda go: (t.log("pre", go[0]), (go[0] * 2,))[1])
    b.grad_fn.register_prehook(lambda go: go)
    b.sum().backward()
    a2 = torch.rand(3, 3, requires_grad=True)
    b2 = t.compile(_mul2(custom))(a2)
    b2.grad_fn.register_prehook(lambda go: t.log("none"))
    b2.sum().backward()
    return a.grad, a2.grad


@program(AG)
def p_grad_fn_prehooks_builtin(t: Tools) -> Any:
    return _grad_fn_prehooks(t, False)


@program(AG)
def p_grad_fn_prehooks_custom(t: Tools) -> Any:
    return _grad_fn_prehooks(t, True)


class _DoubleMul2(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, a: int, y: torch.Tensor) -> Any:
        ctx.a = a
        return a * x * 2, a, a * y * 2

    @staticmethod
    def backward(ctx: Any, g1: torch.Tensor, _a: Any, g2: torch.Tensor) -> Any:
        return ctx.a * g1 * 2, None, ctx.a * g2 * 2


@program(AG)
def p_grad_fn_prehooks_multiple_outputs(t: Tools) -> Any:
    b = torch.rand(3, 3, requires_grad=True)
    var, mean = t.compile(lambda b: torch.var_mean(b, dim=0))(b)
    mean.grad_fn.register_prehook(lambda go: (t.log("var_mean", *go), tuple(g * 2 for g in go))[1])
    (var + mean).sum().backward()
    a, c = torch.randn(3, 3, requires_grad=True), torch.randn(3, 3, requires_grad=True)
    x, _, y = t.compile(lambda a, c: _DoubleMul2.apply(a, 3, c))(a, c)
    x.grad_fn.register_prehook(lambda go: (t.log("custom", go[0], go[1] is None, go[2]), (go[0] * 2, None, go[2] * 2))[1])
    (x + y).sum().backward()
    return b.grad, a.grad, c.grad


@program(AG)
def p_grad_fn_prehooks_removed(t: Tools) -> Any:
    out = []
    for custom in (True, False):
        a = torch.rand(3, 3, requires_grad=True)
        b = t.compile(_mul2(custom))(a)
        handle = b.grad_fn.register_prehook(lambda go: t.log("removed"))
        b.grad_fn.register_prehook(lambda go: t.log("kept"))
        handle.remove()
        b.sum().backward()
        a2 = torch.rand(3, 3, requires_grad=True)
        b2 = t.compile(_mul2(custom))(a2)

        handles: list[Any] = []

        def first(go: Any, handles: list[Any] = handles) -> None:
            t.log("first")
            handles[0].remove()
            handles[1].remove()  # removing a removed hook is fine

        b2.grad_fn.register_prehook(first)
        handles += [b2.grad_fn.register_prehook(lambda go: t.log("second")),
                    b2.grad_fn.register_prehook(lambda go: t.log("third"))]
        handles[1].remove()
        b2.sum().backward()
        out += [a.grad, a2.grad]
    return out


@program(AG)
def p_node_post_hook_registered_in_unpack(t: Tools) -> Any:
    def unpack(x: torch.Tensor) -> torch.Tensor:
        node = torch._C._current_autograd_node()
        node.register_hook(lambda outs, ins: tuple(o / 2.0 if o is not None else None for o in outs))
        return x

    a = torch.rand(3, 3, requires_grad=True)
    f = t.compile(lambda a: sum(torch.var_mean(a, dim=0)).sum())
    f(a).backward()
    ref = a.grad.clone()
    with torch.autograd.graph.saved_tensors_hooks(lambda x: x, unpack):
        f(a).backward()
    return ref, a.grad


@program(AG)
def p_post_acc_grad_hooks_two_in_order(t: Tools) -> Any:
    tensor = torch.rand(3, requires_grad=True)
    tensor.register_post_accumulate_grad_hook(lambda p: (t.log("sub", p.grad), p.sub_(p.grad))[0])
    tensor.register_post_accumulate_grad_hook(lambda p: (t.log("mul", p), p.mul_(4.0))[0])
    t.compile(lambda x: x.sum())(tensor).backward()
    return tensor.detach(), tensor.grad


@program(AG)
def p_post_acc_grad_hooks_two_tensors(t: Tools) -> Any:
    a, b = torch.rand(3, requires_grad=True), torch.rand(5, requires_grad=True)
    for p in (a, b):
        p.register_post_accumulate_grad_hook(lambda p: (t.log("sub", p.grad), p.sub_(p.grad))[0])
    f = t.compile(lambda x: (x * x).sum())
    f(a).backward()
    f(b).backward()
    return a.detach(), b.detach(), a.grad, b.grad


@program(AG)
def p_post_acc_grad_hook_returns_not_none(t: Tools) -> Any:
    tensor = torch.rand(2, 3, requires_grad=True)
    tensor.register_post_accumulate_grad_hook(lambda p: p.grad)
    t.compile(lambda x: x.sum())(tensor).backward()
    return tensor.grad


@program(AG)
def p_post_acc_grad_hook_optimizer_in_backward(t: Tools) -> Any:
    model = nn.Linear(3, 2)
    inp = torch.rand(2, 3)
    optims = {p: torch.optim.SGD([p], lr=0.1, momentum=0.9) for p in model.parameters()}

    def step(p: torch.Tensor) -> None:
        optims[p].step()
        optims[p].zero_grad()

    handles = [p.register_post_accumulate_grad_hook(step) for p in model.parameters()]
    f = t.compile(model)
    for _ in range(3):
        f(inp).sum().backward()
    after = [p.detach().clone() for p in model.parameters()]
    for h in handles:
        h.remove()
    f(inp).sum().backward()
    return after, [p.grad for p in model.parameters()]


@program(AG)
def p_post_acc_grad_hook_ordering(t: Tools) -> Any:
    tensor = torch.rand(3, requires_grad=True)
    acc = tensor.view_as(tensor).grad_fn.next_functions[0][0]
    tensor.register_hook(lambda g: (t.log("tensor_pre", g), g.sub(2.0))[1])
    acc.register_prehook(lambda go: (t.log("acc_pre", go[0]), (go[0].div(5.0),))[1])
    tensor.register_post_accumulate_grad_hook(lambda p: (t.log("post_acc", p.grad), p.grad.add_(0.5))[0])

    def acc_post(gi: Any, go: Any) -> None:
        t.log("acc_post", go[0])
        tensor.grad = go[0].mul(10)

    acc.register_hook(acc_post)
    t.compile(lambda x: x.sum())(tensor).backward()
    return tensor.grad


@program(AG)
def p_prehook_ordering(t: Tools) -> Any:
    def hook1(g: torch.Tensor) -> torch.Tensor:
        t.log("tensor", g)
        return g * 3

    def hook2(gs: Any) -> Any:
        t.log("node", *gs)
        return tuple(g * 2 for g in gs)

    a = torch.tensor(1.0, requires_grad=True)
    b = t.compile(lambda a: a.clone())(a)
    b.grad_fn.register_prehook(hook2)
    b.register_hook(hook1)
    b.grad_fn.register_prehook(hook2)
    acc = b.grad_fn.next_functions[0][0]
    a.register_hook(hook1)
    acc.register_prehook(hook2)
    a.register_hook(hook1)
    b.sum().backward(retain_graph=True)
    t.log("--grad")
    (ga,) = torch.autograd.grad(b.sum(), inputs=(a,), retain_graph=True)
    t.log("--inputs")
    b.sum().backward(inputs=(b,))
    return a.grad, ga, b.grad
