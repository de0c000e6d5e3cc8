"""Programs transcribed from PyTorch's tests of compiled autograd
(``test/inductor/test_compiled_autograd.py``, ``TestCompiledAutograd``) whose
backward is a custom ``torch.autograd.Function``'s: saved tensors (several,
the same one twice, a shape), several gradients, a non-tensor input, classes
made anew, Python side effects and queued callbacks in the backward. Registered
by :mod:`compiled_autograd_programs` (which imports this module and says how
they were transcribed), run by ``ca_program_harness``.
"""

from __future__ import annotations

from typing import Any

import torch
from ca_program_harness import Tools, program

CA = "test/inductor/test_compiled_autograd.py"


class _MySin(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return torch.sin(x)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return g * torch.cos(x)


class _TwoSin(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ctx.save_for_backward(x, y)
        return torch.sin(x), torch.sin(y)

    @staticmethod
    def backward(ctx: Any, gx: torch.Tensor, gy: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = ctx.saved_tensors
        return gx * torch.cos(x), gy * torch.cos(y)


class _SaveTwice(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x, x)
        return torch.sin(x)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        a, b = ctx.saved_tensors
        return g * torch.cos(a) * torch.cos(b)


class _ShapeSaved(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        ctx.n = x.shape[0]
        return x.clone()

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return g * x.shape[0] + ctx.n


SIZES = (10, 100, 10, 15, 20)


def _sized(t: Tools, fn: Any, n_in: int = 1) -> Any:
    f = t.compile(fn)
    out = []
    for i in SIZES:
        xs = [torch.arange(0.0, i, requires_grad=True) for _ in range(n_in)]
        f(*xs).sum().backward()
        out += [x.grad for x in xs]
    return out


@program(CA)
def p_custom_fn_saved_tensors(t: Tools) -> Any:
    return _sized(t, lambda x: _MySin.apply(x))


@program(CA)
def p_custom_fn_saved_multiple_tensors(t: Tools) -> Any:
    return _sized(t, lambda x, y: (lambda a, b: a * b)(*_TwoSin.apply(x, y)), 2)


@program(CA)
def p_custom_fn_saved_multiple_tensors_dedup(t: Tools) -> Any:
    return _sized(t, lambda x: _SaveTwice.apply(x))


@program(CA)
def p_custom_fn_saved_shape(t: Tools) -> Any:
    return _sized(t, lambda x: _ShapeSaved.apply(x))


class _PassTwo(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x + y, y.clone()

    @staticmethod
    def backward(ctx: Any, g1: torch.Tensor, g2: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return g1, g2


@program(CA)
def p_custom_fn_multiple_grads(t: Tools) -> Any:
    return _sized(t, lambda x, y: sum(_PassTwo.apply(x, y)), 2)


class _NonVariable(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, y: int, z: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return x * 2, x * 0 + y * 3, z * 4

    @staticmethod
    def backward(ctx: Any, g1: torch.Tensor, g2: torch.Tensor, g3: torch.Tensor) -> tuple[Any, ...]:
        return g1 + g2, None, g3


@program(CA)
def p_custom_fn_non_variable_input(t: Tools) -> Any:
    return _sized(t, lambda x, z: sum(_NonVariable.apply(x, 1, z)), 2)


def _identity_fn(mult: float) -> type[torch.autograd.Function]:
    class Scale(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            return x * mult

        @staticmethod
        def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
            return g * mult

    return Scale


@program(CA)
def p_custom_fn_same_graph_and_dynamic_class(t: Tools) -> Any:
    one, two = _identity_fn(1.0), _identity_fn(1.0)
    out = []
    for fn in (one, two, one, two, _identity_fn(10.0), _identity_fn(20.0)):
        x = torch.arange(0.0, 10, requires_grad=True)
        t.compile(lambda x, fn=fn: fn.apply(x))(x).sum().backward()
        out.append(x.grad)
    return out


class _LoggingSin(torch.autograd.Function):
    """A backward with Python side effects (upstream: ``print``, a graph break)."""

    log: Any = None

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return torch.sin(x)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        _LoggingSin.log("backward", g)
        return g * torch.cos(x)


@program(CA)
def p_custom_fn_bw_side_effect(t: Tools) -> Any:
    _LoggingSin.log = t.log
    return _sized(t, lambda x: _LoggingSin.apply(x) * 2)


@program(CA)
def p_queued_callback(t: Tools) -> Any:
    class Queue(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            return x.clone()

        @staticmethod
        @torch.autograd.function.once_differentiable
        def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
            torch.autograd.Variable._execution_engine.queue_callback(lambda: t.log("callback"))
            return g

    a = torch.rand(3, 3, requires_grad=True)
    t.compile(lambda a: Queue.apply(a) * 2)(a).sum().backward()
    return a.grad
