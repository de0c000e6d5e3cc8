"""Programs transcribed from PyTorch's tests of hooks in compiled code
(``test/dynamo/test_hooks.py``, ``HooksTests``), run by ``ca_program_harness``.

Upstream compiles the function that registers the hooks (on its inputs, its
intermediates, with closures, ``functools.partial``, globals, handles removed
inside) and checks the gradients against eager; here ``t.compile`` compiles
that function, and each hook also logs what it saw. The frame and compile
counts upstream asserts are not checked.
"""

from __future__ import annotations

import functools
from typing import Any

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


def _add_k(grad: torch.Tensor, *, k: Any = 0, t: Tools | None = None) -> torch.Tensor:
    if t is not None:
        t.log(f"k={k}", grad)
    return grad + k


class _TwoPartialHooks(nn.Module):
    def __init__(self, t: Tools) -> None:
        super().__init__()
        self.t = t

    def forward(self, x: torch.Tensor) -> Any:
        y = x.mul(2)
        y.register_hook(functools.partial(_add_k, k=3, t=self.t))
        y.register_hook(functools.partial(_add_k, k=4, t=self.t))
        return (y.mul(3),)


@program(HOOKS)
def p_intermediary_partial_hooks_module(t: Tools) -> Any:
    x = torch.ones(4, requires_grad=True)
    out = t.compile(_TwoPartialHooks(t))(x)
    out[0].backward(torch.ones(4))
    return out, x.grad


class _InputHook(nn.Module):
    def __init__(self, t: Tools) -> None:
        super().__init__()
        self.hook = functools.partial(_add_k, k=3, t=t)

    def forward(self, x: torch.Tensor) -> Any:
        x.register_hook(self.hook)
        return (x.mul(2).mul(3),)


@program(HOOKS)
def p_input_hook_in_module(t: Tools) -> Any:
    x = torch.ones(4, requires_grad=True)
    out = t.compile(_InputHook(t))(x)
    out[0].backward(torch.ones(4))
    return out, x.grad


class _Counter:
    def __init__(self) -> None:
        self.count = 0

    def do_stuff(self, grad: torch.Tensor) -> torch.Tensor:
        r = grad * grad if self.count % 2 == 0 else grad + grad
        self.count += 1
        return r


class _StatefulHooks(nn.Module):
    def forward(self, x: torch.Tensor, obj: _Counter) -> Any:
        y = x.mul(2)
        y.register_hook(lambda g: obj.do_stuff(g))
        y.register_hook(lambda g: obj.do_stuff(g))
        return (y.mul(3),)


@program(HOOKS)
def p_state_mutating_hooks(t: Tools) -> Any:
    obj = _Counter()
    mod = t.compile(_StatefulHooks())
    x = torch.ones(4, requires_grad=True)
    out = mod(x, obj)
    out[0].backward(torch.ones(4))
    x2 = torch.ones(4, requires_grad=True)
    mod(x2, obj)[0].backward(torch.ones(4))
    return out, x.grad, x2.grad, obj.count


class _Val:
    def __init__(self, val: Any) -> None:
        self.val = val


@program(HOOKS)
def p_partial_hook_object_values(t: Tools) -> Any:
    def fn(x: torch.Tensor, obj: _Val) -> Any:
        y = x.mul(2)
        y.register_hook(functools.partial(lambda g, *, obj: g + obj.val, obj=obj))
        return (y.mul(3),)

    f = t.compile(fn)
    out = []
    for obj in (_Val(torch.tensor(88.0)), _Val(torch.tensor(88.0)), _Val(torch.tensor(99.0)), _Val(11)):
        x = torch.ones(4, requires_grad=True)
        f(x, obj)[0].sum().backward()
        out.append(x.grad)
    return out


@program(HOOKS)
def p_leaf_hook_closure_per_call(t: Tools) -> Any:
    def fn(x: torch.Tensor, obj: _Val) -> torch.Tensor:
        y = x.sin()
        x.register_hook(lambda g: g + obj.val)
        return y.sin()

    f = t.compile(fn)
    grads = []
    for v in (88.0, 99.0):
        x = torch.ones(4, requires_grad=True)
        f(x, _Val(torch.tensor(v))).sum().backward()
        grads.append(x.grad)
    return grads


@program(HOOKS)
def p_leaf_hook_nested_closure(t: Tools) -> Any:
    def fn(x: torch.Tensor) -> torch.Tensor:
        def run() -> torch.Tensor:
            y = x.sin()
            x.register_hook(lambda g: g + y)
            return y.sin()

        return run()

    x = torch.ones(4, requires_grad=True)
    t.compile(fn)(x).sum().backward()
    return x.grad


@program(HOOKS)
def p_intermediate_hook_closure_per_call(t: Tools) -> Any:
    def fn(x: torch.Tensor, obj: _Val) -> torch.Tensor:
        y = x.sin()
        y.register_hook(lambda g: g + obj.val)
        return y.sin()

    f = t.compile(fn)
    grads = []
    for v in (88.0, 99.0):
        x = torch.ones(4, requires_grad=True)
        f(x, _Val(torch.tensor(v))).sum().backward()
        grads.append(x.grad)
    return grads


HOOK_K = {"hook": functools.partial(lambda g, *, k: g * k, k=1)}


@program(HOOKS)
def p_hook_rebound_between_calls(t: Tools) -> Any:
    def h(x: torch.Tensor) -> torch.Tensor:
        y = x.mul(2)
        y.register_hook(HOOK_K["hook"])
        return y.mul(3)

    f = t.compile(h)
    x = torch.randn(2, requires_grad=True)
    HOOK_K["hook"] = functools.partial(lambda g, *, k: g * k, k=1)
    f(x).sum().backward()
    first = x.grad
    x.grad = None
    HOOK_K["hook"] = functools.partial(lambda g, *, k: g * k, k=2)
    f(x).sum().backward()
    HOOK_K["hook"] = functools.partial(lambda g, *, k: g * k, k=1)
    return first, x.grad


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
