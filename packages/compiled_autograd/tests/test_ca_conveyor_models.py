"""Models compiled by conveyor under compiled autograd: their backward graphs are inlined."""

from __future__ import annotations

import copy
import warnings

import conveyor
import conveyor_compiled_autograd as cca
import pytest
import torch
from ca_helpers import assert_same_grads, mlp
from conveyor_compiled_autograd import capture
from torch import nn
from torch._dynamo import compiled_autograd as ca


def _steps(model: nn.Module, ref: nn.Module, batches: tuple[int, ...], session: cca.Session | None = None) -> None:
    for batch in batches:
        x = torch.randn(batch, 4)
        model(x).pow(2).sum().backward()
        with ca._disable():
            ref(x).pow(2).sum().backward()
        assert_same_grads(ref.parameters(), model.parameters())


def test_conveyor_compiled_model_is_inlined() -> None:
    ref = mlp(act=nn.GELU)
    inner = copy.deepcopy(ref)
    model = conveyor.compile(inner)
    with cca.enable() as session:
        _steps(model, ref, (3, 3, 3))
    assert session.captures == 2  # .grad None, then defined
    last = session.last
    assert last is not None and last.inlined >= 1
    assert not any("conveyor" in name for name in last.opaque), last.opaque
    assert last.opaque == ()
    captured = session.last.graphs[0].graph
    assert not any("call_backward" in n.name for n in captured.graph.nodes)
    assert any(n.target is torch.ops.aten.gelu_backward.default for n in captured.graph.nodes)


def test_conveyor_compiled_model_dynamic_batch_compiles_at_most_twice() -> None:
    ref = mlp()
    model = conveyor.compile(copy.deepcopy(ref))
    with cca.enable() as session:
        _steps(model, ref, (3, 5, 9, 4))
    assert session.captures <= 3
    assert all(c.compiles <= 2 for c in session.history), [c.compiles for c in session.history]


def test_torch_compile_conveyor_backend_model() -> None:
    torch._dynamo.reset()
    ref = mlp(act=nn.GELU)
    inner = copy.deepcopy(ref)
    model = torch.compile(inner, backend="conveyor")
    with cca.enable() as session:
        _steps(model, ref, (3, 3, 6))
    assert session.last is not None and session.last.inlined >= 1
    assert session.last.opaque == ()


def test_two_regions_with_eager_ops_between() -> None:
    torch.manual_seed(0)
    a, b = nn.Linear(4, 8), nn.Linear(8, 2)
    ra, rb = copy.deepcopy(a), copy.deepcopy(b)
    ca_, cb = conveyor.compile(a), conveyor.compile(b)
    x = torch.randn(3, 4)
    rb(torch.relu(ra(x)) * 3).pow(2).sum().backward()
    with cca.enable() as session:
        cb(torch.relu(ca_(x)) * 3).pow(2).sum().backward()
    assert session.last.inlined == 2
    assert_same_grads([*ra.parameters(), *rb.parameters()], [*a.parameters(), *b.parameters()])


def test_joint_trace_is_not_captured() -> None:
    """Regression (autograd stage): a forward compiled inside compiled autograd
    traces its joint with compiled autograd off, so only the user's backward is captured."""
    model = conveyor.compile(mlp(act=nn.GELU))
    graphs: list[torch.fx.GraphModule] = []
    with ca._enable(lambda gm: graphs.append(gm) or gm):
        model(torch.randn(3, 4)).sum().backward()  # the first call compiles, inside the context
    assert len(graphs) == 1
    with cca.enable() as session:
        conveyor.compile(mlp())(torch.randn(3, 4)).sum().backward()
    assert session.captures == 1


def test_probe_failure_falls_back_to_opaque_with_one_warning(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(capture, "probe", lambda: "pretend torch changed")
    monkeypatch.setattr(capture, "_warned", [])
    ref = mlp()
    model = conveyor.compile(copy.deepcopy(ref))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            with cca.enable() as session:
                _steps(model, ref, (3,))
    messages = [str(w.message) for w in caught if "not inlined" in str(w.message)]
    assert len(messages) == 1 and "pretend torch changed" in messages[0]
    assert session.last.inlined == 0
    assert session.last.opaque == ("call_backward(conveyor_autograd.runtime.CompiledFunction)",)


def test_probe_passes_on_this_torch() -> None:
    assert capture.probe() is None


def test_triton_backend_small_case() -> None:
    pytest.importorskip("triton")
    ref = mlp(d_in=4, hidden=8, d_out=2, act=nn.GELU)
    model = conveyor.compile(copy.deepcopy(ref), backend="triton")
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no segment falls back to eager
        with cca.enable(backend="triton") as session:
            _steps(model, ref, (3, 5))
    assert session.last.inlined == 1
    assert session.last.graphs[-1].stage == "triton"


def test_only_changed_sizes_become_symbolic() -> None:
    # Note [Only changed sizes symbolic]: new batch sizes compile a symbolic variant in which
    # the sizes every call had stay static; gradients stay eager's at every shape
    ref = mlp()
    model = conveyor.compile(copy.deepcopy(ref))
    with cca.enable() as session:
        for batch, seq in ((3, 2), (5, 2), (6, 2), (6, 7), (4, 9), (5, 9)):
            x = torch.randn(batch, seq, 4)
            model(x).pow(2).sum().backward()
            with ca._disable():
                ref(x).pow(2).sum().backward()
            assert_same_grads(ref.parameters(), model.parameters())
    variants = [
        v for c in session.history for p in c.backward.programs.values() for vs in p.variants.values() for v in vs
    ]
    fixed = [v.fixed for v in variants if v.static is None]
    assert fixed and all(fixed), fixed  # each symbolic variant kept some size static


def test_a_symbolic_variant_checks_the_sizes_it_kept_static() -> None:
    from conveyor_compiled_autograd.program import Variant, _changed_dims
    from torch.fx.experimental.symbolic_shapes import DimDynamic

    x = torch.empty(6, 5)
    assert _changed_dims(x, [(torch.Size([3, 5]), (5, 1), 0)]) == [DimDynamic.DYNAMIC, DimDynamic.STATIC]
    assert _changed_dims(x, []) == [DimDynamic.DYNAMIC] * 2  # nothing seen: every size a symbol
    assert _changed_dims(x, [(torch.Size([3]), (1,), 0)]) == [DimDynamic.DYNAMIC] * 2  # another rank
    variant = Variant(lambda args: args, None, (0,), (), fixed=((0, 1, 5),))
    assert variant.holds([torch.empty(9, 5)])
    assert not variant.holds([torch.empty(9, 6)])
