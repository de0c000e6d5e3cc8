"""Programs transcribed from PyTorch's ``test/dynamo/test_backward_higher_order_ops.py``
(commit 0316fdce3d7cd6b72508ea175f38e4ad19ed5072, ``BackwardHigherOrderOpTests``):
tensor hooks whose body goes through ``trace_wrapped`` (the higher-order op
compiled autograd uses for hooks), registered inside a compiled function or on a
leaf before it, with state a hook mutates (a counter behind ``functools.partial``)
and a hook that breaks a dynamo graph. Upstream runs them under torch's compiled
autograd and checks the graph it captures; here each runs in every mode of
``ca_program_harness`` (conveyor's forward, conveyor's compiled autograd), and
the hooks' calls and gradients are compared with eager. The ``make_fx`` tests,
which only print a graph, are left out. Registered by
:mod:`checkpoint_hook_programs`.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from ca_program_harness import Tools, program
from torch._dynamo._trace_wrapped_higher_order_op import trace_wrapped

BWD_HOP = "test/dynamo/test_backward_higher_order_ops.py"


def _multiply(x: torch.Tensor) -> torch.Tensor:
    return x * x


def _multiply_invoke(grad: torch.Tensor) -> torch.Tensor:
    return trace_wrapped(grad, fn=_multiply)


def _pair() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.tensor([0.5, 0.5], requires_grad=True), torch.tensor([0.5, 0.5], requires_grad=True)


@program(BWD_HOP)
def p_invoke_in_pt2(t: Tools) -> Any:
    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x.register_hook(_multiply_invoke)
        return x * y

    x, y = _pair()
    out = t.compile(fn)(x, y)
    out.backward(torch.tensor([2.0, 2.0]))
    return out, x.grad, y.grad


@program(BWD_HOP)
def p_invoke_in_pt2_compiled_autograd(t: Tools) -> Any:
    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x.register_hook(_multiply_invoke)
        return x + y

    x, y = _pair()
    out = t.compile(fn)(x, y)
    out.backward(torch.tensor([2.0, 2.0]))
    return out, x.grad, y.grad


class _Counter:
    def __init__(self) -> None:
        self.counter = 0


def _stateful(x: torch.Tensor, obj: _Counter) -> torch.Tensor:
    obj.counter = obj.counter + 1
    return _multiply(x)


def _invoke_with(grad: torch.Tensor, fn: Any) -> torch.Tensor:
    return trace_wrapped(grad, fn=fn)


@program(BWD_HOP)
def p_invoke_in_pt2_compiled_autograd_side_effect(t: Tools) -> Any:
    obj = _Counter()
    x, y = _pair()
    x.register_hook(functools.partial(_invoke_with, fn=functools.partial(_stateful, obj=obj)))
    f = t.compile(lambda a, b: a + b)
    counts = []
    for _ in range(3):
        f(x, y).backward(torch.tensor([2.0, 2.0]))
        counts.append(obj.counter)
    return counts, x.grad, y.grad


def _breaking(x: torch.Tensor) -> torch.Tensor:
    torch._dynamo.graph_break()  # upstream: print("Boo!")
    return _multiply(x)


@program(BWD_HOP)
def p_invoke_in_pt2_compiled_autograd_graph_breaks(t: Tools) -> Any:
    # torch's compiled autograd with fullgraph=True raises Unsupported; eager runs the hook
    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x.register_hook(functools.partial(_invoke_with, fn=_breaking))
        return x + y

    x, y = _pair()
    out = t.compile(fn)(x, y)
    out.backward(torch.tensor([2.0, 2.0]))
    return out, x.grad, y.grad


@program(BWD_HOP)
def p_invoke_hook_on_intermediate(t: Tools) -> Any:
    # not upstream's: the trace_wrapped hook on an intermediate, logged
    def hook(g: torch.Tensor) -> torch.Tensor:
        t.log("intermediate", g)
        return trace_wrapped(g, fn=_multiply)

    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        z = x * y
        z.register_hook(hook)
        return z.sin()

    x, y = _pair()
    t.compile(fn)(x, y).sum().backward()
    return x.grad, y.grad
