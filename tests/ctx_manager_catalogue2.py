"""More context-manager programs (registered in :data:`ctx_manager_catalogue.PROGRAMS`):
``CtxManagerTests``' user context managers (classes and generators that switch grad mode,
decorators, inactive contexts, saved-tensor hooks, SDPA backends) and
``ContextlibContextManagerTests`` of PyTorch's ``test/dynamo/test_ctx_manager.py``
(``contextlib.contextmanager`` user contexts, graph breaks inside them, ``__enter__``
and ``__exit__`` called by hand)."""

from __future__ import annotations

import contextlib
import sys

import torch
import torch.nn.functional as F
from ctx_manager_catalogue import BOTH, X1, prog, randn

# -- CtxManagerTests: user context managers ---------------------------------------------


class CustomizedCtxManager:
    def __init__(self, mode):
        self.prev = torch.is_grad_enabled()
        self.mode = mode

    def __enter__(self):
        torch._C._set_grad_enabled(self.mode)

    def __exit__(self, *exc):
        torch._C._set_grad_enabled(self.prev)


@contextlib.contextmanager
def customized_ctx_manager(mode):
    prev = torch.is_grad_enabled()
    try:
        yield torch._C._set_grad_enabled(mode)
    finally:
        torch._C._set_grad_enabled(prev)


class CustomizedCtxManagerWithGraphBreak(CustomizedCtxManager):
    def __enter__(self):
        torch._dynamo.graph_break()
        super().__enter__()


@contextlib.contextmanager
def customized_ctx_manager_with_graph_break(mode):
    prev = torch.is_grad_enabled()
    try:
        torch._dynamo.graph_break()
        yield torch._C._set_grad_enabled(mode)
    finally:
        torch._C._set_grad_enabled(prev)


def _generic(ctx, brk):
    def fn(x):
        with ctx(True):
            x = x + 1
            if torch.is_grad_enabled():
                x = x * 2
            if brk:
                torch._dynamo.graph_break()
            x = torch.relu(x)
        return x - 1

    return fn


def _nested_generic(ctx, brk):
    def fn(x):
        with ctx(True):
            x = x + 1
            if torch.is_grad_enabled():
                x = x * 2
            with ctx(False):
                if torch.is_grad_enabled():
                    x = x - 3
                if brk:
                    torch._dynamo.graph_break()
                x = x * 1.5
            x = torch.relu(x)
        return x - 1

    return fn


for _ctx in (CustomizedCtxManager, customized_ctx_manager):
    _n = _ctx.__name__
    prog(f"generic_context_manager_{_n}", X1, BOTH)(_generic(_ctx, False))
    prog(f"generic_context_manager_with_graph_break_{_n}", X1, BOTH)(_generic(_ctx, True))
    prog(f"nested_generic_context_manager_{_n}", X1, BOTH)(_nested_generic(_ctx, False))
    prog(f"nested_generic_context_manager_with_graph_break_{_n}", X1, BOTH)(_nested_generic(_ctx, True))

for _ctx in (CustomizedCtxManagerWithGraphBreak, customized_ctx_manager_with_graph_break):

    def _gmwgb(x, _ctx=_ctx):
        with _ctx(False):
            if torch.is_grad_enabled():
                z = x + 1000
            else:
                z = (x * 2).sin() + 3
        return z

    prog(f"generic_ctx_manager_with_graph_break_{_ctx.__name__}", X1)(_gmwgb)


@prog("return_context_manager", X1)
def _return_context_manager(x):
    cm = CustomizedCtxManager(False)
    with cm:
        y = x + 1
    return cm.mode, y


@prog("context_wrapping_grad_mode_decorator", X1, BOTH)
def _wrapping_decorator(x):
    out = []
    for wrapper, inverse, mode_inverse in (
        (torch.enable_grad, torch.no_grad, False),
        (torch.no_grad, torch.enable_grad, True),
    ):
        for call in (True, False):
            with inverse():
                inner = wrapper()(torch.sin) if call else wrapper(lambda x: x.sin())
                assert torch.is_grad_enabled() == mode_inverse
            with inverse():
                out.append(inner(x))
    return out


@prog("context_wrapping_set_grad_enabled_nested_function", X1, BOTH)
def _wrapping_set_grad_enabled(x):
    out = []
    for mode in (True, False):
        with torch.set_grad_enabled(not mode):

            @torch.set_grad_enabled(mode)
            def inner(x):
                return x.sin()

            assert torch.is_grad_enabled() == (not mode)
        with torch.set_grad_enabled(not mode):
            out.append(inner(x))
    return out


@prog("inactive_context_graph_break_local", X1, BOTH)
def _inactive_local(x):
    x = x + 1
    ctx = torch.set_grad_enabled(True)  # sets grad mode at construction
    torch._dynamo.graph_break()
    with ctx:
        x = x + 1
    return x


@prog("inactive_context_graph_break_local_nullctx", X1)
def _inactive_nullctx(x):
    x = x + 1
    ctx = contextlib.nullcontext()
    torch._dynamo.graph_break()
    with ctx:
        x = x + 1
    return x


def _gn_ctx(ctx):
    torch._dynamo.graph_break()
    return ctx


@prog("inactive_context_graph_break_stack", X1, BOTH)
def _inactive_stack(x):
    x = x + 1
    with _gn_ctx(torch.set_grad_enabled(True)):
        x = x + 1
    return x


@prog("disable_saved_tensors_hooks", X1)
def _disable_saved_tensors_hooks(z):
    @torch.autograd.graph.disable_saved_tensors_hooks("This is not supported")
    def f(x, y):
        @torch.autograd.graph.disable_saved_tensors_hooks("inner")
        def inner(x, y):
            return x + y

        return inner(x, y) * x

    return f(z, z.cos())


@prog("disable_saved_tensors_hooks_graph_break", X1)
def _disable_saved_tensors_hooks_graph_break(x):
    with torch.autograd.graph.disable_saved_tensors_hooks("This is not supported"):
        y = x + 1
        torch._dynamo.graph_break()
        return y * 2


@prog("sdpa_kernel_ctx_manager", randn((2, 2, 2, 2)))
def _sdpa_kernel(x):
    before = set(torch.nn.attention._cur_sdpa_kernel_backends())
    with torch.nn.attention.sdpa_kernel([torch.nn.attention.SDPBackend.MATH]):
        out1 = F.scaled_dot_product_attention(x, x, x)
        assert torch.nn.attention._cur_sdpa_kernel_backends() == [torch.nn.attention.SDPBackend.MATH]
        torch._dynamo.graph_break()
        out2 = F.scaled_dot_product_attention(x, x, x)
    assert set(torch.nn.attention._cur_sdpa_kernel_backends()) == before
    return out1 + out2


# -- ContextlibContextManagerTests --------------------------------------------------------


@contextlib.contextmanager
def _set_default_dtype(dtype):
    old = torch.get_default_dtype()
    try:
        torch.set_default_dtype(dtype)
        yield
    finally:
        torch.set_default_dtype(old)


@prog("ctx_basic0", randn((2,)))
def _ctx_basic0(x):
    with _set_default_dtype(torch.float64):
        y = torch.tensor([3.0, 3.0 + 5.0j])
        z = torch.ones(2) + x
    return y, z, torch.ones(2)


@contextlib.contextmanager
def _compute_sin(x):
    try:
        yield x.sin()
    finally:
        pass


@prog("ctx_basic1", X1)
def _ctx_basic1(x):
    with _compute_sin(x) as y:
        return y.cos()


def _create_ctx():
    @contextlib.contextmanager
    def ctx(x):
        try:
            yield x.sin()
        finally:
            pass

    return ctx


@prog("change_parent_0", X1)
def _change_parent_0(x):
    with _create_ctx()(x) as y:
        return y.cos()


@contextlib.contextmanager
def _whoo_break(x):
    y = x.tan()
    try:
        torch._dynamo.graph_break()
        yield y
    finally:
        pass


@prog("graph_break_inside_ctx", X1)
def _graph_break_inside_ctx(x):
    y = x.sin()
    with _whoo_break(x) as z:
        y += z.neg()
    y += x.cos()
    return y


@prog("graph_break_inside_ctx_1", X1)
def _graph_break_inside_ctx_1(x):
    def bar(x):
        with _whoo_break(x) as z:
            return z.neg()

    return x.sin() + bar(x) + x.cos()


@contextlib.contextmanager
def _whoo(x):
    try:
        yield x + 1
    finally:
        pass


@prog("graph_break_after___enter__", X1)
def _graph_break_after_enter(x):
    ctx = _whoo(x)
    try:
        y = ctx.__enter__()
        torch._dynamo.graph_break()
    finally:
        ctx.__exit__(None, None, None)
    return y


@prog("contextlib_suppress", X1)
def _contextlib_suppress(t):
    y = t.sin()
    with contextlib.suppress(ValueError):
        y += t.cos()
    return y.tan()


@prog("contextlib_redirect_stdout", X1)
def _contextlib_redirect(t):
    y = t.sin()
    with contextlib.redirect_stdout(sys.stderr):
        y += t.cos()
    return y.tan()


@prog("contextlib_nullcontext", X1)
def _contextlib_nullcontext(t):
    with contextlib.nullcontext():
        return t.sin()


@contextlib.contextmanager
def _grad_off_then_on():
    with torch.no_grad():
        yield
    torch._dynamo.graph_break()


@prog("generator_ctx_grad_mode_with_break_after", X1, BOTH)
def _generator_ctx_grad(x):
    with _grad_off_then_on():
        y = x * 2
    return y, x + 1
