"""Programs transcribed from the hook sections of PyTorch's autograd tests
(``test/test_autograd.py``, ``TestAutograd``: tensor hooks, ``grad_fn`` pre
and post hooks, ``retain_grad``, post-accumulate-grad hooks, hook ordering,
hooks under ``autograd.grad`` and ``backward(inputs=...)``, saved-tensor
hooks, module backward hooks, ``retain_graph``, ``create_graph``), run by
``ca_program_harness``. Upstream runs them eagerly (and, wrapped, under
torch's compiled autograd); here the forward piece each builds its graph with
goes through ``t.compile``, and every hook logs what it saw.
"""

from __future__ import annotations

from typing import Any

import torch
from ca_program_harness import Tools, program
from torch import nn

AG = "test/test_autograd.py"


def _hook(t: Tools, kind: str, scale: float | None = None) -> Any:
    def hook(g: Any) -> Any:
        t.log(kind, g)
        return None if scale is None else g * scale

    return hook


@program(AG)
def p_hooks_counter_and_modify(t: Tools) -> Any:
    x = torch.ones(5, 5, requires_grad=True)
    y = (torch.ones(5, 5) * 4).requires_grad_(True)
    z = t.compile(lambda x, y: x**2 + x * 2 + x * y + y)(x, y)
    x.register_hook(_hook(t, "x"))
    h1 = z.register_hook(_hook(t, "z1"))
    z.backward(torch.ones(5, 5), retain_graph=True)
    h2 = z.register_hook(_hook(t, "z2"))
    z.backward(torch.ones(5, 5), retain_graph=True)
    h2.remove()
    z.backward(torch.ones(5, 5), retain_graph=True)
    h1.remove()
    z.register_hook(_hook(t, "z_double", 2.0))
    with torch.no_grad():
        y.grad.zero_()
    z.backward(torch.ones(5, 5), retain_graph=True)
    first = y.grad.clone()
    y.register_hook(_hook(t, "y_double", 2.0))
    with torch.no_grad():
        y.grad.zero_()
    z.backward(torch.ones(5, 5))
    return first, y.grad, x.grad


@program(AG)
def p_hooks_batchnorm_eval(t: Tools) -> Any:
    bn = nn.BatchNorm1d(5, affine=False).double().eval()
    x = torch.ones(5, 5, dtype=torch.double, requires_grad=True)
    z = t.compile(bn)(x)
    z.register_hook(_hook(t, "z", 2.0))
    z.sum().backward()
    return x.grad


class _NoneGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x.clone(), y.clone()

    @staticmethod
    def backward(ctx: Any, gx: torch.Tensor, gy: torch.Tensor) -> tuple[Any, Any]:
        return gx, None


@program(AG)
def p_hook_none(t: Tools) -> Any:
    x, y = torch.randn(5, 5, requires_grad=True), torch.randn(5, 5)
    rx, ry = t.compile(lambda x, y: _NoneGrad.apply(x, y))(x, y)
    rx.register_hook(_hook(t, "rx"))
    ry.register_hook(_hook(t, "ry"))
    (rx + ry).sum().backward()
    return x.grad


@program(AG)
def p_retain_grad(t: Tools) -> Any:
    inp = torch.rand(1, 3, requires_grad=True)

    def f(inp: torch.Tensor) -> Any:
        h1 = inp * 3
        h1.retain_grad()
        h1.retain_grad()
        return h1, (h1 * h1).sum()

    h1, out = t.compile(f)(inp)
    out.backward(retain_graph=True)
    g1 = h1.grad.clone()
    out.backward(retain_graph=True)
    g2 = h1.grad.clone()
    with torch.no_grad():
        inp.grad.zero_()
    inp.retain_grad()
    out.backward()
    return g1, g2, inp.grad


@program(AG)
def p_retain_grad_outside(t: Tools) -> Any:
    inp = torch.rand(1, 3, requires_grad=True)
    h1 = t.compile(lambda i: i * 3)(inp)
    h1.retain_grad()
    out = t.compile(lambda h: (h * h).sum())(h1)
    out.backward(retain_graph=True)
    g1 = h1.grad.clone()
    out.backward()
    return g1, h1.grad, inp.grad


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
def p_retain_grad_inplace(t: Tools) -> Any:
    def f(a: torch.Tensor, times: int) -> torch.Tensor:
        a = a.clone()
        a.retain_grad()
        for _ in range(times):
            a.mul_(2)
        return a

    out = []
    for times in (1, 2):
        leaf = torch.tensor([1.0], requires_grad=True)
        a = t.compile(f)(leaf, times)
        a.sum().backward()
        out += [a.grad, leaf.grad]
    return out


@program(AG)
def p_retain_grad_inplace_over_view(t: Tools) -> Any:
    def f(leaf: torch.Tensor) -> Any:
        base = leaf.clone()
        view, view2 = base[:], base[:]
        view.retain_grad()
        view2.retain_grad()
        view.mul_(2)
        return view, view2

    leaf = torch.tensor([1.0], requires_grad=True)
    view, view2 = t.compile(f)(leaf)
    (view + view2).sum().backward()
    return view.grad, view2.grad, leaf.grad


@program(AG)
def p_retains_grad_inplace_multiple_outputs(t: Tools) -> Any:
    b = torch.rand(3, 3, requires_grad=True)

    def f(b: torch.Tensor) -> Any:
        var, mean = torch.var_mean(b, dim=0)
        var.retain_grad()
        mean.retain_grad()
        var.mul_(2)
        return var, mean

    var, mean = t.compile(f)(b)
    (var + mean).sum().backward()
    return var.grad, mean.grad, b.grad


@program(AG)
def p_tensor_hooks_inplace(t: Tools) -> Any:
    a = torch.tensor([1.0], requires_grad=True)

    def f(a: torch.Tensor) -> torch.Tensor:
        b = a.clone()
        b.register_hook(_hook(t, "before", 2.0))
        b.mul_(2)
        b.register_hook(_hook(t, "after", 2.0))
        return b

    t.compile(f)(a).sum().backward()
    a2 = torch.tensor([1.0], requires_grad=True)

    def g(a: torch.Tensor) -> torch.Tensor:
        b = a.clone()
        b.register_hook(_hook(t, "twice", 2.0))
        b.mul_(2)
        b.mul_(2)
        return b

    t.compile(g)(a2).sum().backward()
    return a.grad, a2.grad


@program(AG)
def p_tensor_hooks_inplace_multiple_outputs(t: Tools) -> Any:
    b = torch.rand(3, 3, requires_grad=True)

    def f(b: torch.Tensor) -> Any:
        out1, out2 = torch.var_mean(b, dim=0)
        out1.register_hook(_hook(t, "out1"))
        out2.register_hook(_hook(t, "out2"))
        out1.mul_(2)
        out1.register_hook(_hook(t, "out1_new"))
        return out1, out2

    out1, out2 = t.compile(f)(b)
    (out1 + out2 * 3).sum().backward()
    return b.grad


@program(AG)
def p_tensor_hooks_inplace_over_view(t: Tools) -> Any:
    leaf = torch.tensor([1.0], requires_grad=True)

    def f(leaf: torch.Tensor) -> Any:
        base = leaf.clone()
        view, view2 = base[:], base[:]
        view.register_hook(_hook(t, "view"))
        view2.register_hook(_hook(t, "view2"))
        view.mul_(2)
        _ = view2.grad_fn  # refreshes the view's grad_fn, as upstream does
        view2.register_hook(_hook(t, "view2_new"))
        return view, view2

    view, view2 = t.compile(f)(leaf)
    (view + view2).sum().backward()
    return leaf.grad


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
def p_hook_object_without_name(t: Tools) -> Any:
    class Hook:
        def __call__(self, g: torch.Tensor) -> torch.Tensor:
            t.log("hook", g)
            return g.clone()

    x = torch.randn(5, requires_grad=True)
    y = t.compile(lambda x: x.clone())(x)
    y.register_hook(Hook())
    y.sum().backward()
    return x.grad


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
