"""Automatic dynamic shapes for ``conveyor.compile`` (Note [Automatic dynamic shapes])."""

import conveyor
import pytest
import torch
from conveyor import Plugins, Request
from conveyor.testing import check
from conveyor.testing.pytest_plugin import stage_plugin
from core_helpers import GraphBackend, backend


def _symbolic(entry):
    return entry.guards is not None


def test_a_batch_size_sweep_compiles_once_more_symbolically():
    def f(x, w):
        return torch.relu(x @ w).sum(1) * x.shape[0]

    c = conveyor.compile(f)
    w = torch.randn(4, 3)
    for b in range(2, 9):
        x = torch.randn(b, 4)
        torch.testing.assert_close(c(x, w), f(x, w))
    assert c.compiles == 2 and _symbolic(c.last)
    # only the size that changed is a symbol: the weight stays static
    assert "L['t1'].size()[0] == 4" in c.last.guards.source
    check(f, torch.randn(11, 4), w, compile=lambda fn: c)
    assert c.compiles == 2


def test_a_violated_guard_recompiles_instead_of_running_wrong():
    def f(x):
        if x.shape[0] > 3:  # the symbolic trace assumes s0 > 3
            return x * 2
        return x - 1

    c = conveyor.compile(f)
    for n in (5, 6, 7):
        x = torch.randn(n)
        torch.testing.assert_close(c(x), f(x))
    assert c.compiles == 2 and "3 < L['t0'].size()[0]" in c.last.guards.source.replace("4 <= ", "3 < ")
    x = torch.randn(2)
    torch.testing.assert_close(c(x), x - 1)  # guard fails: a new compile, eager's branch
    assert c.compiles == 3
    torch.testing.assert_close(c(torch.ones(9)), torch.full((9,), 2.0))
    assert c.compiles == 3


def test_dynamic_true_is_symbolic_from_the_first_call_and_false_always_specializes():
    def f(x):
        return x.sin() + 1

    on, off = conveyor.compile(f, dynamic=True), conveyor.compile(f, dynamic=False)
    for n in (2, 3, 4):
        x = torch.randn(n, 3)
        torch.testing.assert_close(on(x), f(x))
        torch.testing.assert_close(off(x), f(x))
    assert on.compiles == 1 and _symbolic(on.last)
    assert off.compiles == 3 and not _symbolic(off.last)


class Cache:
    def __init__(self):
        self.k = None

    def update(self, x):
        self.k = x if self.k is None else torch.cat([self.k, x], dim=1)
        return self.k


def test_a_32_token_decoding_loop_does_not_recompile_per_token():
    w = torch.randn(4, 4)

    def step(x, cache):
        k = cache.update(x @ w)
        scores = torch.softmax(x @ k.transpose(1, 2), dim=-1)
        return scores @ k

    c = conveyor.compile(step)
    eager, compiled = Cache(), Cache()
    for _ in range(32):
        x = torch.randn(2, 1, 4)
        torch.testing.assert_close(c(x, compiled), step(x, eager))
    torch.testing.assert_close(compiled.k, eager.k)
    # None-ness of the cache, the first token, then one symbolic program for the rest
    assert c.compiles == 3 and _symbolic(c.last)


class RefusesSymbols(GraphBackend):
    def compile(self, request: Request, options):
        if any(isinstance(t, torch.Tensor) and not all(isinstance(s, int) for s in t.shape) for t in request.inputs):
            raise NotImplementedError("this backend takes static sizes only")
        return super().compile(request, options)


def test_a_stage_that_cannot_take_symbols_compiles_static_with_a_warning():
    plugins = Plugins()
    spec = backend("static_only")
    plugins.register(stage_plugin(type(spec)(name="static_only", kind="backend", impl=RefusesSymbols())), name="s")
    c = conveyor.compile(lambda x: x * 3, plugins=plugins, backend="static_only")
    c(torch.ones(2))
    with pytest.warns(UserWarning, match="static sizes: with symbolic sizes it failed: .*static sizes only"):
        out = c(torch.ones(3))
    torch.testing.assert_close(out, torch.full((3,), 3.0))
    assert not _symbolic(c.last)


class BuggyUnderSymbols(GraphBackend):
    def compile(self, request: Request, options):
        if any(isinstance(t, torch.Tensor) and not all(isinstance(s, int) for s in t.shape) for t in request.inputs):
            raise ValueError("a bug that shows only with symbolic sizes")
        return super().compile(request, options)


class DeclaresNoSymbols(GraphBackend):
    def compile(self, request: Request, options):
        if any(isinstance(t, torch.Tensor) and not all(isinstance(s, int) for s in t.shape) for t in request.inputs):
            raise conveyor.SymbolicSizesUnsupported("declared", "static shapes only")
        return super().compile(request, options)


def test_only_a_declared_refusal_of_symbols_compiles_static():
    """Core Note [Refusing symbolic sizes]: a stage's other failures are not
    hidden behind a static compile."""
    for name, impl, refuses in (("declared", DeclaresNoSymbols(), True), ("buggy", BuggyUnderSymbols(), False)):
        plugins = Plugins()
        plugins.register(stage_plugin(type(backend(name))(name=name, kind="backend", impl=impl)), name=name)
        c = conveyor.compile(lambda x: x * 3, plugins=plugins, backend=name)
        c(torch.ones(2))
        if refuses:
            with pytest.warns(UserWarning, match="static sizes: with symbolic sizes it failed: .*static shapes only"):
                torch.testing.assert_close(c(torch.ones(3)), torch.full((3,), 3.0))
        else:
            with pytest.raises(conveyor.StageError, match="a bug that shows only with symbolic sizes"):
                c(torch.ones(3))


def test_behind_dynamo_a_declared_refusal_of_symbols_compiles_static_per_call():
    """Core Note [Refusing symbolic sizes], behind dynamo: a graph dynamo made
    symbolic that a stage refuses compiles with each call's static sizes, with
    a warning, instead of failing dynamo's compile."""
    import conveyor.dynamo

    plugins = Plugins()
    plugins.register(stage_plugin(type(backend("declared"))(name="declared", kind="backend", impl=DeclaresNoSymbols())))
    pipeline = conveyor.Pipeline(conveyor.resolve({"backend": "declared"}), plugins)
    torch._dynamo.reset()
    f = torch.compile(lambda x: x * 3, backend=conveyor.dynamo.backend(pipeline), dynamic=True)
    with pytest.warns(UserWarning, match="static sizes: with symbolic sizes it failed: .*static shapes only"):
        torch.testing.assert_close(f(torch.ones(2)), torch.full((2,), 3.0))
    torch.testing.assert_close(f(torch.ones(5)), torch.full((5,), 3.0))


def test_the_dynamic_key_is_configuration():
    assert conveyor.resolve({"dynamic": True}).dynamic is True
    assert conveyor.resolve(environ={"CONVEYOR_DYNAMIC": "0"}).dynamic is False
    assert conveyor.resolve(environ={"CONVEYOR_DYNAMIC": "auto"}).dynamic is None
    with pytest.raises(conveyor.ConfigError, match="'dynamic' must be"):
        conveyor.resolve({"dynamic": "sometimes"})


def test_tied_weights_do_not_keep_a_module_static():
    class Tied(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = torch.nn.Embedding(10, 4)
            self.head = torch.nn.Linear(4, 10, bias=False)
            self.head.weight = self.embed.weight  # one tensor, lifted in two positions

        def forward(self, ids):
            return self.head(self.embed(ids))

    m = Tied()
    c = conveyor.compile(m)
    for n in (3, 4, 6):
        ids = torch.randint(0, 10, (2, n))
        torch.testing.assert_close(c(ids), m(ids))
    assert c.compiles == 2 and _symbolic(c.last)
