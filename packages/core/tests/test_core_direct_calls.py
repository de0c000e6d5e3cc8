"""Note [Direct op calls]: the eager backend runs a graph's generated code with
each op bound to its C++ operator; results, dispatch and autograd are those of
the graph's own ``forward``."""

from __future__ import annotations

import linecache

import torch
from conveyor.protocol.backends.direct_calls import _CALL_SITE, direct_forward
from torch.fx.experimental.proxy_tensor import make_fx
from torch.utils._python_dispatch import TorchDispatchMode


def _program(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = torch.nn.functional.linear(x, w).relu()
    z = torch.full((2,), 3.0, dtype=torch.float64) + y.sum().to(torch.float64)  # dtype constants in the code
    return torch.where(y > 0, y, x.sum()) * 2, z  # aten.where.self: an overload named like the namespace's own argument


class _Recording(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[object] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
        self.calls.append(func)
        return func(*args, **(kwargs or {}))


def _inputs(requires_grad: bool) -> list[torch.Tensor]:
    torch.manual_seed(0)
    return [torch.randn(3, 4), torch.randn(5, 4, requires_grad=requires_grad)]


def test_direct_calls_give_the_graphs_results_gradients_and_dispatch() -> None:
    gm = make_fx(_program)(*_inputs(False))
    run = direct_forward(gm)
    for requires_grad in (False, True):
        a, b = _inputs(requires_grad), _inputs(requires_grad)
        expected, got = gm.forward(*a), run(b)
        for e, g in zip(expected, got, strict=True):
            torch.testing.assert_close(g, e)
            assert g.dtype == e.dtype and g.requires_grad == e.requires_grad
        if requires_grad:
            (ga,) = torch.autograd.grad(expected[0].sum(), a[1])
            (gb,) = torch.autograd.grad(got[0].sum(), b[1])
            torch.testing.assert_close(gb, ga)
    with _Recording() as seen_graph:
        gm.forward(*_inputs(False))
    with _Recording() as seen_direct:
        run(_inputs(False))
    assert seen_direct.calls == seen_graph.calls and seen_graph.calls


def test_direct_calls_take_a_lazy_graph_module() -> None:
    from torch.fx._lazy_graph_module import _LazyGraphModule

    gm = make_fx(_program)(*_inputs(False))
    lazy = _LazyGraphModule(gm, gm.graph)
    run = direct_forward(lazy)
    # Note [Code generated, compiled once]: FX's source compiled once, by the backend, with its call sites named
    assert lazy._needs_recompile()
    torch.testing.assert_close(run(_inputs(False)), gm.forward(*_inputs(False)))
    boxed = run.boxed()  # type: ignore[attr-defined]
    assert boxed is not None and lazy._needs_recompile()
    torch.testing.assert_close(boxed(_inputs(False)), gm.forward(*_inputs(False)))
    compiled = [k for k in linecache.cache if k.startswith("<conveyor eager backend")]
    source = "".join(linecache.cache[compiled[-2]][2])  # the forward's, then the boxed call's
    assert source == _CALL_SITE.sub(lambda m: "_conveyor_call_{}_{}_{}(".format(*m.groups()), lazy.code)
    torch.testing.assert_close(lazy(*_inputs(False)), gm.forward(*_inputs(False)))  # the module's own forward


def test_transpose_pairs_are_read_as_the_tensor_except_outputs_and_writes() -> None:
    """Note [Transpose pairs]."""
    from conveyor.protocol.backends.fold_views import fold_transpose_pairs
    from conveyor.protocol.backends.rewriting import rewritten

    def program(w: torch.Tensor, x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        # the second pair is an output: kept; a chain of three is one t
        return x @ w.t().t(), w.t().t(), x @ (w * 2).t().t().t()

    w, x = torch.randn(4, 4), torch.randn(3, 4)
    gm = make_fx(program)(w, x)
    folded = rewritten(gm, fold_transpose_pairs)
    t = torch.ops.aten.t.default
    assert sum(n.target is t for n in gm.graph.nodes) == 7
    assert sum(n.target is t for n in folded.graph.nodes) == 3
    for e, g in zip(gm(w, x), folded(w, x), strict=True):
        torch.testing.assert_close(g, e)
        assert g.stride() == e.stride()

    def writes(w: torch.Tensor) -> torch.Tensor:
        y = w.t().t()
        y.t_()
        return w + 1

    gm = make_fx(writes)(torch.randn(2, 3))
    assert rewritten(gm, fold_transpose_pairs) is gm


def test_linear_calls_give_eagers_one_call_and_the_same_bits() -> None:
    """Note [Linear calls]."""
    from conveyor.protocol.backends.fold_views import linear_calls
    from conveyor.protocol.backends.rewriting import rewritten

    def program(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, ...]:
        shared = w.t()
        return (
            torch.nn.functional.linear(x, w, b),  # addmm(b, x, t(w))
            torch.nn.functional.linear(x, w),  # mm(x, t(w))
            torch.addmm(b, x, w.t(), beta=2.0),  # not the default beta: stays
            x @ shared,
            shared.sum(),  # the t has two readers: stays
        )

    x, w, b = torch.randn(3, 4), torch.randn(5, 4), torch.randn(5)
    gm = make_fx(program)(x, w, b)
    folded = rewritten(gm, linear_calls)
    targets = [n.target for n in folded.graph.nodes if n.op == "call_function"]
    assert targets.count(torch.ops.aten.linear.default) == 2
    assert targets.count(torch.ops.aten.t.default) == 2
    for e, g in zip(gm(x, w, b), folded(x, w, b), strict=True):
        assert torch.equal(g, e)


def test_call_sites_name_their_callable() -> None:
    """Note [Calls by name]: each call site of the graph's code names what the
    op's four attribute lookups gave."""
    import types

    def program(x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x).t()

    gm = make_fx(program)(torch.randn(2, 3))
    run = direct_forward(gm)
    x = torch.randn(2, 3)
    torch.testing.assert_close(run([x]), program(x), rtol=0, atol=0)
    cells = [c.cell_contents for c in run.__closure__ or ()]
    forward = next(f for f in cells if isinstance(f, types.FunctionType) and f.__name__ == "forward")
    assert forward.__globals__["_conveyor_call_aten_t_default"] is torch.t  # its torch-level binding (Note [Torch-level calls])
    assert forward.__globals__["_conveyor_call_aten_relu_default"] is torch.ops.aten.relu.default._op
    assert "ops" not in forward.__code__.co_names  # no attribute lookups left


def _early_last_use(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    h = (x * 2).sum(0)  # x's last reader
    return (h + w).relu() * 3


def test_the_boxed_call_clears_its_list_and_frees_an_input_at_its_last_use() -> None:
    """Note [Inputs freed at their last use]: same results and dispatch; the
    list is cleared and an input nothing else holds dies at its last reader."""
    import weakref

    gm = make_fx(_early_last_use)(torch.randn(3, 4), torch.randn(4))
    run = direct_forward(gm)
    boxed = run.boxed()  # type: ignore[attr-defined]
    assert boxed is not None and run.boxed() is boxed  # type: ignore[attr-defined]
    torch.manual_seed(0)
    x, w = torch.randn(3, 4), torch.randn(4)
    args = [x.clone(), w]
    assert torch.equal(boxed(args)[0], run([x, w])[0]) and args == []
    alive: list[bool] = []

    class _Watch(_Recording):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):  # type: ignore[no-untyped-def]
            if func is torch.ops.aten.relu.default:
                alive.append(ref() is not None)  # x's last reader has run
            return super().__torch_dispatch__(func, types, args, kwargs)

    given = [torch.randn(3, 4), w]
    ref = weakref.ref(given[0])
    with _Watch() as seen_boxed:
        boxed(given)
    other = torch.randn(3, 4)
    with _Recording() as seen_graph:
        gm.forward(other, w)
    assert alive == [False] and seen_boxed.calls == seen_graph.calls


def test_no_boxed_call_without_a_plain_signature() -> None:
    gm = make_fx(lambda: torch.ones(2) * 2)()
    assert direct_forward(gm).boxed() is None  # type: ignore[attr-defined]
