"""Programs transcribed from PyTorch's tests of hooks in compiled code
(``test/dynamo/test_hooks.py``, ``HooksTests``) whose hooks hold state:
``functools.partial`` hooks, hooks a module holds, hooks mutating an object,
closures over a new object each call, a global hook rebound between calls.
Registered by :mod:`hook_programs` (which imports this module), run by
``ca_program_harness``; as there, each hook is registered inside the function
``t.compile`` compiles.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from ca_program_harness import Tools, program
from torch import nn

HOOKS = "test/dynamo/test_hooks.py"


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


def _closure_per_call(t: Tools, fn: Any) -> Any:
    """``fn`` compiled once and called twice, each call with a new object its
    hook closes over; the gradients of both calls."""
    f = t.compile(fn)
    grads = []
    for v in (88.0, 99.0):
        x = torch.ones(4, requires_grad=True)
        f(x, _Val(torch.tensor(v))).sum().backward()
        grads.append(x.grad)
    return grads


@program(HOOKS)
def p_leaf_hook_closure_per_call(t: Tools) -> Any:
    def fn(x: torch.Tensor, obj: _Val) -> torch.Tensor:
        y = x.sin()
        x.register_hook(lambda g: g + obj.val)
        return y.sin()

    return _closure_per_call(t, fn)


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

    return _closure_per_call(t, fn)


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
