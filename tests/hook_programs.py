"""Programs transcribed from PyTorch's tests of hooks in compiled code
(``test/dynamo/test_hooks.py``, ``HooksTests``), run by ``ca_program_harness``.

Upstream compiles the function that registers the hooks (on its inputs, its
intermediates, with closures, ``functools.partial``, globals, handles removed
inside) and checks the gradients against eager; here ``t.compile`` compiles
that function, and each hook also logs what it saw. The frame and compile
counts upstream asserts are not checked. Here: tensor hooks on inputs and
intermediates, post-accumulate-grad hooks and module forward hooks; the hooks
that hold state (partials, closures, objects) are in :mod:`hook_closure_programs`,
imported here so that importing this module registers the whole file.
"""

from __future__ import annotations

from typing import Any

import hook_closure_programs  # noqa: F401  (registers the stateful-hook programs)
import torch
from ca_program_harness import Tools, program
from torch import nn

HOOKS = "test/dynamo/test_hooks.py"


def _v() -> torch.Tensor:
    return torch.tensor([0.0, 0.0, 0.0], requires_grad=True)


G = torch.tensor([1.0, 2.0, 3.0])


@program(HOOKS)
def p_register_hook_only_returns_input(t: Tools) -> Any:
    def fn(x: torch.Tensor) -> torch.Tensor:
        x.register_hook(lambda g: (t.log("x", g), g * 2)[1])
        return x

    v = t.compile(fn)(_v())
    v.backward(G)
    return v.grad


@program(HOOKS)
def p_register_hook_input_with_outputs(t: Tools) -> Any:
    def fn(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> Any:
        x.register_hook(lambda g: (t.log("x", g), g * 2)[1])
        return x, y * y, z * z

    v = _v()
    outs = t.compile(fn)(v, torch.randn(2, 2), torch.randn(2, 2))
    outs[0].backward(G)
    return v.grad, outs[1], outs[2]


@program(HOOKS)
def p_handle_removed_inside(t: Tools) -> Any:
    def fn(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor) -> Any:
        handle = x.register_hook(lambda g: (t.log("removed", g), g * 2)[1])
        z = z * z
        handle.remove()
        x.register_hook(lambda g: (t.log("kept", g), g * 3)[1])
        return x, y * y, z

    v = _v()
    t.compile(fn)(v, torch.randn(2, 2), torch.randn(2, 2))[0].backward(G)
    return v.grad


@program(HOOKS)
def p_handles_returned_then_removed(t: Tools) -> Any:
    def fn(x: torch.Tensor) -> Any:
        h0 = x.register_hook(lambda g: (t.log("h0", g), g * 4)[1])
        h1 = x.register_hook(lambda g: (t.log("h1", g), g / 2)[1])
        h2 = x.register_hook(lambda g: (t.log("h2", g), g * 3)[1])
        return x, x * x, h0, h1, h2

    v, _, *handles = t.compile(fn)(_v())
    v.backward(G)
    first = v.grad.clone()
    for h in handles:
        h.remove()
    v.backward(G)
    return first, v.grad


@program(HOOKS)
def p_hook_on_input_and_intermediate_inner(t: Tools) -> Any:
    def fn(x: torch.Tensor) -> Any:
        def local_hook(g: torch.Tensor) -> torch.Tensor:
            t.log("local", g)
            return g * 2

        z = x * x
        x.register_hook(local_hook)
        z.register_hook(local_hook)
        return x, z

    x = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    v, z = t.compile(fn)(x)
    z.backward(G)
    return x.grad, z


@program(HOOKS)
def p_hook_on_intermediate(t: Tools) -> Any:
    def fn(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        y.register_hook(lambda g: (t.log("y", g), g + 1)[1])
        return y.sum()

    x = torch.randn(4, requires_grad=True)
    t.compile(fn)(x).backward()
    return x.grad


GLOBAL_LIST: list[Any] = []
GLOBAL_DICT: dict[str, Any] = {}


@program(HOOKS)
def p_hook_on_intermediate_in_containers(t: Tools) -> Any:
    def fn(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        GLOBAL_LIST.append(y)
        GLOBAL_DICT["tensor"] = y
        a = GLOBAL_LIST[0] * 3
        y.register_hook(lambda g: (t.log("y", g), g + 1)[1])
        return (a + GLOBAL_DICT["tensor"]).sum()

    GLOBAL_LIST.clear()
    GLOBAL_DICT.clear()
    x = torch.ones(4, requires_grad=True)
    t.compile(fn)(x).backward()
    GLOBAL_LIST.clear()
    GLOBAL_DICT.clear()
    return x.grad


@program(HOOKS)
def p_hook_on_intermediate_used_before_and_after(t: Tools) -> Any:
    def fn(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        z = y + 1
        y.register_hook(lambda g: (t.log("y", g), g * 2)[1])
        return (z + y * 3).sum()

    x = torch.ones(2, requires_grad=True)
    t.compile(fn)(x).backward()
    return x.grad


@program(HOOKS)
def p_hook_on_intermediate_then_cond(t: Tools) -> Any:
    def fn(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        y.register_hook(lambda g: (t.log("y", g), g * 2)[1])
        return torch.cond(x.sum() > 0, lambda s: s + 1, lambda s: s - 1, (y,)).sum()

    x = torch.ones(3, requires_grad=True)
    t.compile(fn)(x).backward()
    return x.grad


@program(HOOKS)
def p_hook_on_intermediate_returns_none(t: Tools) -> Any:
    def fn(x: torch.Tensor) -> torch.Tensor:
        y = x * 2
        y.register_hook(lambda g: t.log("y", g))
        return y.sum()

    x = torch.ones(4, requires_grad=True)
    t.compile(fn)(x).backward()
    return x.grad


@program(HOOKS)
def p_hook_stores_gradients(t: Tools) -> Any:
    seen: list[torch.Tensor] = []

    def fn(x: torch.Tensor) -> torch.Tensor:
        y = x * 2

        def store(g: torch.Tensor) -> torch.Tensor:
            seen.append(g)
            return g * 2

        y.register_hook(store)
        return (y + x).sum()

    x = torch.ones(3, requires_grad=True)
    t.compile(fn)(x).backward()
    return x.grad, seen


@program(HOOKS)
def p_post_acc_grad_hook_registered_inside(t: Tools) -> Any:
    def hook(p: torch.Tensor) -> None:
        t.log("post_acc", p, p.grad)
        p.mul_(p.grad)
        p.grad.mul_(5)

    def reg_and_mul(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x.register_post_accumulate_grad_hook(hook)
        return x * y

    x = torch.tensor([0.5, 0.5, 0.5], requires_grad=True)
    y = torch.tensor([1.0, 2.0, 3.0], requires_grad=True)
    out = t.compile(reg_and_mul)(x, y)
    x.backward(torch.tensor([2.0, 2.0, 2.0]))
    return out, x.detach(), x.grad, y.grad


@program(HOOKS)
def p_post_acc_grad_hook_across_steps(t: Tools) -> Any:
    x = torch.ones(10, requires_grad=True)

    def hook(p: torch.Tensor) -> None:
        p.grad *= 2

    x.register_post_accumulate_grad_hook(hook)
    f = t.compile(lambda i: x * i)
    out = []
    for i in range(4):
        x.grad = None
        f(torch.tensor(float(i))).sum().backward()
        out.append(x.grad)
    return out


@program(HOOKS)
def p_forward_hook_added_after_compile(t: Tools) -> Any:
    lin = nn.Linear(16, 16)
    f = t.compile(lambda x: lin(x))
    x = torch.ones(16, 16, requires_grad=True)
    first = f(x)
    lin.register_forward_hook(lambda m, i, o: o * 2)
    second = f(x)
    second.sum().backward()
    return first, second, x.grad, lin.weight.grad


@program(HOOKS)
def p_forward_pre_hook_changes_input(t: Tools) -> Any:
    mod = nn.Linear(18, 18, bias=False)
    mod.register_forward_pre_hook(lambda m, inp: inp[0] + 1)
    x = torch.rand(18, 18, requires_grad=True)
    out = t.compile(mod)(x)
    out.sum().backward()
    return out, x.grad, mod.weight.grad


@program(HOOKS)
def p_global_forward_pre_hook_counts(t: Tools) -> Any:
    class Sub1(nn.Module):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return x - 1

    counter = [0]

    def hook(mod: nn.Module, args: Any) -> Any:
        counter[0] += 1
        return args

    handle = nn.modules.module.register_module_forward_pre_hook(hook)
    try:
        x = torch.rand(18, 18, requires_grad=True)
        out = t.compile(Sub1())(x)
        out.sum().backward()
    finally:
        handle.remove()
    return out, x.grad, counter[0] > 0
