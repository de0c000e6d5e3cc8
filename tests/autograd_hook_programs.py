"""Programs transcribed from the hook sections of PyTorch's autograd tests
(``test/test_autograd.py``, ``TestAutograd``), run by ``ca_program_harness``.
Upstream runs them eagerly (and, wrapped, under torch's compiled autograd);
here the forward piece each builds its graph with goes through ``t.compile``,
and every hook logs what it saw. Here: tensor hooks (counting, modifying,
``None`` gradients, in-place ops, views, several outputs) and ``retain_grad``;
``grad_fn`` hooks, post-accumulate-grad hooks and hook ordering are in
:mod:`autograd_node_hook_programs`, imported here so that importing this module
registers them too; ``autograd.grad``, saved-tensor hooks, module backward
hooks, ``retain_graph`` and ``create_graph`` in :mod:`autograd_grad_programs`.
"""

from __future__ import annotations

from typing import Any

import autograd_node_hook_programs  # noqa: F401  (registers the node-hook programs)
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
