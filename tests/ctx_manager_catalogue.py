"""Programs that use global-state context managers inside the compiled function,
from PyTorch's ``test/dynamo/test_ctx_manager.py`` (``CtxManagerTests``,
``ContextlibContextManagerTests``; names are the upstream tests' without
``test_``, a suffix numbers further programs of one test), plus the settings
that file does not reach (inference mode, ``torch.device`` as a context and
``set_default_device``, ``torch.cpu.amp`` / ``torch.cuda.amp`` autocast on CPU
tensors, ``DisableTorchFunction``, contexts entered by the caller and exited
inside, contexts entered inside and left open). CUDA streams, events and
``torch.cuda.device`` are left out (no GPU here); tests of dynamo's graph
counts and exception tracebacks are left out (nothing to compare).

Each program is registered with :func:`prog`: its inputs, and the *outer*
setting every call is made under (:data:`OUTER`). :mod:`ctx_manager_harness`
runs them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F

Make = Callable[[], list[Any]]


@dataclasses.dataclass(frozen=True)
class CtxProgram:
    name: str
    fn: Callable[..., Any]
    make: Make
    #: the setting each call is made under (a key of ``ctx_manager_harness.OUTER``)
    outer: str = "grad"


PROGRAMS: dict[str, CtxProgram] = {}

#: contexts a program entered and left open: the harness closes them after recording the state
LEFT_OPEN: list[Any] = []
#: contexts the caller entered for a program to exit (outer ``"entered_no_grad"`` ...)
ENTERED: list[Any] = []


def prog(name: str, make: Make, outers: tuple[str, ...] = ("grad",)) -> Callable[[Callable[..., Any]], Any]:
    def register(f: Callable[..., Any]) -> Callable[..., Any]:
        for o in outers:
            key = name if len(outers) == 1 else f"{name}[{o}]"
            assert key not in PROGRAMS, key
            PROGRAMS[key] = CtxProgram(key, f, make, o)
        return f

    return register


def randn(*shapes: tuple[int, ...]) -> Make:
    return lambda: [torch.randn(*s) for s in shapes]


BOTH = ("grad", "no_grad")
X2 = randn((3, 4), (3, 4))
X1 = randn((2, 3))
MM = randn((4, 4), (4, 4))

# -- CtxManagerTests: grad mode ---------------------------------------------------------


@prog("no_grad_fn1", X2, BOTH)
def _no_grad1(a, b):
    x = a + 1
    with torch.no_grad():
        x = x + b
    return x + 2


@prog("no_grad_fn2", X2, BOTH)
def _no_grad2(a, b):
    x = a + 1
    with torch.set_grad_enabled(False):
        x = x + b
    return x + 2


@prog("no_grad_fn3", X2, BOTH)
def _no_grad3(a, b):
    x = a + 1
    with torch.enable_grad():
        x = x + b
    return x + 2


@prog("no_grad_fn4", X2, BOTH)
def _no_grad4(a, b):
    x = a + 1
    with torch.set_grad_enabled(True):
        if torch.is_grad_enabled():
            x = x + b
    return x + 2


@prog("grad_mode_guard", X2, BOTH)
def _grad_mode_guard(a, b):
    prev = torch.is_grad_enabled()
    torch.set_grad_enabled(False)
    a = a + 1
    a.tolist()  # graph break
    ret = a + b
    torch.set_grad_enabled(prev)
    return ret


@prog("nested_grad_mode_graph_break", X1, BOTH)
def _nested_grad_mode(x):
    before = torch.is_grad_enabled()
    with torch.set_grad_enabled(False):
        torch._dynamo.graph_break()
        with torch.set_grad_enabled(True):
            x = torch.mul(x, 5)
            torch._dynamo.graph_break()
            x = torch.sqrt(x.abs())
            assert torch.is_grad_enabled()
        assert not torch.is_grad_enabled()
    assert torch.is_grad_enabled() == before
    return x


@prog("autograd_profiler", X1)
def _autograd_profiler(x):
    y = x**2
    with torch.autograd.profiler.profile():
        y = y + 2
        with torch.autograd.profiler.record_function("my_function"):
            z = y**3
            z.tolist()  # graph break
            z = z + 1
    return z


@prog("autograd_profiler_enabled", X1, ("grad", "profiler"))
def _profiler_enabled(x):
    if torch.autograd._profiler_enabled():
        return x + 1
    return x - 1


# -- CtxManagerTests: autocast on CPU ---------------------------------------------------


@prog("is_autocast_cpu_enabled", MM, ("grad", "autocast"))
def _is_autocast_cpu_enabled(a, b):
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        c = torch.mm(a, b)
        if torch.is_autocast_cpu_enabled():
            c = c + 1
    return c


@prog("autocast_cpu", randn((2,)))
def _autocast_cpu(x):
    a, b, d = (torch.rand((8, 8)) for _ in range(3))
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        e = torch.mm(a, b)
        f = torch.mm(d, e)
    return f, x + 1


@prog("autocast_cpu_graph_break", randn((2,)))
def _autocast_cpu_graph_break(x):
    a, b = torch.rand((8, 8)), torch.rand((8, 8))
    torch._dynamo.graph_break()
    d = torch.rand((8, 8))
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        e = torch.mm(a, b)
        torch._dynamo.graph_break()
        f = torch.mm(d, e)
    return f, x * 2


@prog("autocast_cpu_graph_break_2", randn((4, 4)))
def _autocast_cpu_graph_break_2(x):
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        x = torch.mm(x, x)
        torch._dynamo.graph_break()
        x = torch.relu(x)
    return x


def _mm_breaks(x, y):
    torch._dynamo.graph_break()
    return torch.mm(x, y)


@prog("autocast_cpu_graph_break_inner_fn", MM, ("grad", "autocast"))
def _autocast_inner_fn(a, b):
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        torch._dynamo.graph_break()
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=False):
            torch._dynamo.graph_break()
            g32 = torch.mm(a, b)
            with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
                torch._dynamo.graph_break()
                f16_1 = _mm_breaks(a, b)
        f16 = _mm_breaks(a, b)
        assert f16.dtype == f16_1.dtype
    return f16, g32


@prog("autocast_graph_break_method", randn((8, 8), (8, 8), (8, 8)))
def _autocast_graph_break_method(a, b, bias):
    bias = bias.to(torch.bfloat16)
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        with torch.autocast(device_type="cpu", dtype=torch.bfloat16, enabled=False):
            g32 = torch.mm(a, b)
        f16 = _mm_breaks(a, b) + bias
        assert f16[0][0] == (torch.mm(a, b) + bias)[0][0]
    return f16, g32


@prog("autocast_arguments_binding", randn((2, 3)), ("grad", "autocast"))
def _autocast_arguments_binding(x):
    with torch.autocast(device_type="cuda", enabled=False):
        y = torch.sin(x + 1)
    with torch.autocast(device_type="cpu", enabled=False):
        z = torch.cos(x + 1) @ x.t()
    return y, z


def _cpu_half(f):
    @torch.autocast(device_type="cpu", dtype=torch.bfloat16)
    def new_fwd(*args):
        return f(*args)

    return new_fwd


_mm_bf16 = _cpu_half(torch.mm)


@prog("autocast_decorator", MM)
def _autocast_decorator(a, b):
    return _mm_bf16(a, b), torch.mm(a, b)


@prog("autocast_sdpa", randn((1, 2, 3, 8), (1, 2, 3, 8), (1, 2, 3, 8)))
def _autocast_sdpa(q, k, v):
    with torch.autocast("cpu"):
        with torch.autocast("cuda", dtype=torch.float32):
            return F.scaled_dot_product_attention(q, k, v, None, 0.0, True)


def _inlining_autocast_gn(x, y):
    with torch.autocast(device_type="cpu", dtype=torch.bfloat16):
        z = torch.mm(x, y)
        torch._dynamo.graph_break()
        return torch.sin(z)


@prog("graph_break_inlining_autocast", MM)
def _graph_break_inlining_autocast(x, y):
    return torch.mm(x, y) + _inlining_autocast_gn(x, y)


def _inlining_grad_gn(z):
    with torch.no_grad():
        torch._dynamo.graph_break()
        return torch.sin(z)


@prog("graph_break_inlining_grad", randn((4, 4), (4, 4), (4,)))
def _graph_break_inlining_grad(x, y, z):
    a = torch.mm(x, y)
    _inlining_grad_gn(z)
    return a
