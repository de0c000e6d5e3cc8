"""More programs transcribed from ``test/test_autograd.py`` (``TestAutograd``):
hooks under ``autograd.grad`` and ``backward(inputs=...)``, accumulate-grad node
hooks, saved-tensor hooks, module backward hooks, no-grad regions,
``create_graph`` and double backward, run by ``ca_program_harness``.
"""

from __future__ import annotations

from typing import Any

import torch
from ca_program_harness import Tools, program
from torch import nn

AG = "test/test_autograd.py"


@program(AG)
def p_retains_grad_observes_tensor_prehook(t: Tools) -> Any:
    out = []
    for retain_first in (False, True):
        a = torch.tensor(1.0, requires_grad=True)
        b = t.compile(lambda a: a.clone())(a)
        if not retain_first:
            b.register_hook(lambda g: (t.log("pre", g), g * 2)[1])
        b.retain_grad()
        b.register_hook(lambda g: (t.log("post", g), g * 2)[1])
        b.clone().backward()
        out += [b.grad, a.grad]
    return out


@program(AG)
def p_accumulate_grad_posthooks_observe_tensor_prehook(t: Tools) -> Any:
    a = torch.tensor(1.0, requires_grad=True)
    b = t.compile(lambda a: a.clone())(a)
    acc = b.grad_fn.next_functions[0][0]
    acc.register_hook(lambda gi, go: t.log("acc_post", len(gi), *go))
    acc.register_prehook(lambda go: t.log("acc_pre", *go))
    a.register_hook(lambda g: (t.log("tensor", g), g * 2)[1])
    b.backward()
    return a.grad


@program(AG)
def p_accumulate_grad_posthooks_not_run_off_inputs(t: Tools) -> Any:
    a, b = torch.tensor(1.0, requires_grad=True), torch.tensor(1.0, requires_grad=True)
    a.register_hook(lambda g: t.log("a_must_not_run"))
    out, c = t.compile(lambda a, b: (lambda c: (a + b + c, c))(a.clone()))(a, b)
    c.grad_fn.next_functions[0][0].register_hook(lambda gi, go: t.log("acc_must_not_run"))
    out.sum().backward(inputs=[b])
    return a.grad, b.grad


@program(AG)
def p_hooks_under_grad_and_inputs(t: Tools) -> Any:
    a = torch.tensor(1.0, requires_grad=True)
    b = t.compile(lambda a: a * 2)(a)
    c = b * 2
    a.register_hook(lambda g: t.log("tensor_a", g))
    b.register_hook(lambda g: t.log("tensor_b", g))
    acc = b.grad_fn.next_functions[0][0]
    acc.register_hook(lambda gi, go: t.log("acc_post"))
    acc.register_prehook(lambda go: t.log("acc_pre"))
    b.grad_fn.register_hook(lambda gi, go: t.log("b_post"))
    b.grad_fn.register_prehook(lambda go: t.log("b_pre"))
    out = [torch.autograd.grad(c, inputs=(b,), retain_graph=True)]
    t.log("--")
    out.append(torch.autograd.grad(c, inputs=(a, b), retain_graph=True))
    t.log("--")
    c.backward(retain_graph=True)
    t.log("--")
    c.backward(inputs=(a, b), retain_graph=True)
    return out, a.grad, b.grad


@program(AG)
def p_sharded_grad(t: Tools) -> Any:
    leaves = [torch.zeros(5, 5, requires_grad=True) for _ in range(6)]
    f = t.compile(lambda *ls: [v * i + v * v for i, v in enumerate(ls)])
    inter = f(*leaves)
    loss = sum(v * i for i, v in enumerate(inter)).sum()
    d = [g for k in range(0, len(inter), 2) for g in torch.autograd.grad(loss, inter[k:k + 2], retain_graph=True)]
    torch.autograd.backward(inter, d)
    return [leaf.grad for leaf in leaves]


@program(AG)
def p_grad_unreachable(t: Tools) -> Any:
    x, y = torch.ones(1, requires_grad=True), torch.ones(1, requires_grad=True)
    two_x = t.compile(lambda x: x * 2)
    gx, gy = torch.autograd.grad(two_x(x), [x, y], allow_unused=True)
    z = torch.ones(1, requires_grad=True)
    gx2, gz = torch.autograd.grad(two_x(x), [x, z], allow_unused=True)
    return gx, gy, gx2, gz


@program(AG)
def p_grad_unused_raises(t: Tools) -> Any:
    x, y = torch.ones(1, requires_grad=True), torch.ones(1, requires_grad=True)
    return torch.autograd.grad(t.compile(lambda x: x * 2)(x), [x, y], allow_unused=False)


@program(AG)
def p_grad_nonleaf_unbind_hook(t: Tools) -> Any:
    x = torch.randn(5, requires_grad=True)
    parts = t.compile(lambda x: (x * 1).unbind())(x)
    parts[0].register_hook(lambda g: t.log("part0", g))
    grads = []
    for i in range(5):
        parts[i].backward(retain_graph=True)
        grads.append(x.grad.clone())
    return grads


@program(AG)
def p_backward_with_inputs(t: Tools) -> Any:
    x, y = torch.randn(2, 2, dtype=torch.double, requires_grad=True), torch.randn(2, 2, dtype=torch.double, requires_grad=True)
    f = t.compile(lambda x, y: x**2 + y * x + y**2)
    out = []
    for inputs in ([x, y], [x], [y], y):
        torch.autograd.backward(f(x, y), torch.ones(2, 2, dtype=torch.double), inputs=inputs)
        out += [x.grad.clone() if x.grad is not None else None, y.grad.clone() if y.grad is not None else None]
        with torch.no_grad():
            for p in (x, y):
                if p.grad is not None:
                    p.grad.zero_()
    return out


@program(AG)
def p_multi_and_dependent_backward(t: Tools) -> Any:
    x, y, q, a, b = (torch.randn(5, 5, requires_grad=True) for _ in range(5))
    z, c = t.compile(lambda x, y, q, a, b: (lambda q2: (x + y + q2, a * b + q2))(q * 2))(x, y, q, a, b)
    torch.autograd.backward([z, c], [torch.randn(5, 5), torch.randn(5, 5)])
    w = torch.randn(10, requires_grad=True)
    p2, p3 = t.compile(lambda w: (lambda s: (s, s**3))(w**2))(w)
    torch.autograd.backward([p2, p3], [torch.randn(10), torch.randn(10)])
    return x.grad, y.grad, q.grad, a.grad, b.grad, w.grad


@program(AG)
def p_accumulate_grad_create_graph(t: Tools) -> Any:
    out = []
    for create_graph in (False, True):
        x = torch.randn(5, 5, requires_grad=True)
        y = t.compile(lambda x: x + 2)(x)
        y.backward(torch.ones(5, 5), retain_graph=True)
        first, first_clone = x.grad, x.grad.clone()
        y.backward(torch.ones(5, 5), create_graph=create_graph)
        out += [first, first_clone, x.grad, first is x.grad]
    return out


@program(AG)
def p_hessian_vector_create_graph(t: Tools) -> Any:
    x, y = torch.randn(2, 2, requires_grad=True), torch.randn(2, 2, requires_grad=True)
    z = t.compile(lambda x, y: x**2 + y * x + y**2)(x, y)
    z.backward(torch.ones(2, 2), create_graph=True)
    first = (x.grad.detach().clone(), y.grad.detach().clone())
    (2 * x.grad + y.grad).backward(torch.ones(2, 2))
    return first, x.grad, y.grad


@program(AG)
def p_double_backward_grad(t: Tools) -> Any:
    x = torch.randn(4, requires_grad=True)
    y = t.compile(lambda x: (x.sin() * x).sum())(x)
    (g,) = torch.autograd.grad(y, x, create_graph=True)
    (gg,) = torch.autograd.grad(g.sum(), x)
    return g.detach(), gg


@program(AG)
def p_backward_twice_without_retain_raises(t: Tools) -> Any:
    x = torch.randn(3, requires_grad=True)
    y = t.compile(lambda x: (x.exp() * x).sum())(x)
    y.backward()
    y.backward()
    return x.grad


@program(AG)
def p_no_grad_regions(t: Tools) -> Any:
    x = torch.ones(5, 5, requires_grad=True)
    y = torch.ones(5, 5) * 4

    def f(x: torch.Tensor, y: torch.Tensor) -> Any:
        with torch.no_grad():
            w = x + y
        z = x * w
        with torch.enable_grad():
            v = z.sin()
        return w, v

    w, v = t.compile(f)(x, y)
    v.sum().backward()
    return w, w.requires_grad, v, x.grad


@program(AG)
def p_no_unnecessary_save(t: Tools) -> Any:
    mu = torch.ones(1, requires_grad=True)
    x = torch.empty(1)
    f = t.compile(lambda x, ft: (x * ft).sum())
    loss: Any = 0
    for i in range(3):
        x.detach_()
        x.copy_(mu + i)
        loss = loss + f(x, torch.tensor([float(i)]))
    loss.backward()
    return mu.grad, loss


@program(AG)
def p_saved_tensor_hooks(t: Tools) -> Any:
    a = torch.randn(5, requires_grad=True)

    def pack(x: torch.Tensor) -> Any:
        t.log("pack", x)
        return x * 1

    def unpack(x: torch.Tensor) -> torch.Tensor:
        t.log("unpack", x)
        return x

    f = t.compile(lambda a: (a * a).sin().sum())
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        y = f(a)
    y.backward()
    return a.grad


@program(AG)
def p_saved_tensor_hooks_change_value(t: Tools) -> Any:
    a = torch.randn(5, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(lambda x: x * 2, lambda x: x):
        y = t.compile(lambda a: (a * a).sum())(a)
    y.backward()
    return a.grad


@program(AG)
def p_save_on_cpu(t: Tools) -> Any:
    model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
    x = torch.randn(3, 4)
    with torch.autograd.graph.save_on_cpu():
        y = t.compile(model)(x)
    y.sum().backward()
    return [p.grad for p in model.parameters()]


@program(AG)
def p_module_full_backward_hooks(t: Tools) -> Any:
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    model[0].register_full_backward_hook(lambda m, gi, go: t.log("m0", gi[0], go[0]))
    model[2].register_full_backward_pre_hook(lambda m, go: (t.log("m2_pre", go[0]), (go[0] * 3,))[1])
    model.register_full_backward_hook(lambda m, gi, go: t.log("whole", gi[0], go[0]))
    x = torch.randn(3, 4, requires_grad=True)
    f = t.compile(model)
    for _ in range(2):
        f(x).sum().backward()
    return x.grad, [p.grad for p in model.parameters()]


@program(AG)
def p_custom_function_backward_raises(t: Tools) -> Any:
    class Boom(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            return x.clone()

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
            raise ValueError("simulated error in backward")

    t1, t2 = torch.rand(3, 3, requires_grad=True), torch.rand(3, 3, requires_grad=True)
    t.compile(lambda a, b: Boom.apply((a + b) * (a + b)))(t1, t2).sum().backward()
    return t1.grad


@program(AG)
def p_custom_function_setup_context(t: Tools) -> Any:
    class Square(torch.autograd.Function):
        @staticmethod
        def forward(x: torch.Tensor) -> torch.Tensor:
            return x**2

        @staticmethod
        def setup_context(ctx: Any, inputs: Any, output: Any) -> None:
            ctx.save_for_backward(inputs[0])

        @staticmethod
        def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
            (x,) = ctx.saved_tensors
            return g * 2 * x

    x = torch.randn([], requires_grad=True)
    return torch.autograd.grad(t.compile(lambda x: Square.apply(x))(x), x)


@program(AG)
def p_accumulate_grad_zero_numel(t: Tools) -> Any:
    a, b = torch.rand(4, 0, requires_grad=True), torch.rand(4, 1, requires_grad=True)
    t.compile(lambda a, b: a + b)(a, b).sum().backward()
    return a.grad, b.grad


@program(AG)
def p_gradient_edge_two_steps(t: Tools) -> Any:
    x = torch.tensor([1.0, 2.0], requires_grad=True)

    tmp = t.compile(lambda x: x.sin().cos().sum())(x)
    out = t.compile(lambda tmp: tmp.exp().clone().sin().sum())(tmp)
    edge = torch.autograd.graph.get_gradient_edge(tmp)
    (g_tmp,) = torch.autograd.grad(out, (edge,), retain_graph=True)
    (gx,) = torch.autograd.grad(edge, (x,), grad_outputs=(g_tmp,))
    return g_tmp, gx


@program("test/dynamo/test_hooks.py")
def p_cond_with_gradient(t: Tools) -> Any:
    """test_hook_on_intermediate_with_higher_order_op without its hook."""

    def fn(x: torch.Tensor) -> torch.Tensor:
        return torch.cond(x.sum() > 0, lambda s: s + 1, lambda s: s - 1, (x * 2,)).sum()

    x = torch.ones(3, requires_grad=True)
    t.compile(fn)(x).backward()
    return x.grad
