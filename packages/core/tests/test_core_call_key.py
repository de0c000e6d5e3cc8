"""The per-call key (Note [A cheap call key], Note [Module state per call]):
every change to a compiled module's state that changes the program is seen at
the next call, through ``conveyor.compile`` and behind dynamo; the final graph
of a call under ``no_grad`` holds no ``detach``."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import conveyor
import pytest
import torch
from conveyor.analysis.signature import CallSignature
from conveyor.frontend.capture import ModuleState, lifted_state
from conveyor.runtime import cache


class Scale(torch.nn.Module):
    """Two same-shaped parameters used differently: a mix-up is visible."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Parameter(torch.tensor([1.0, 2.0, 3.0, 4.0]))
        self.b = torch.nn.Parameter(torch.tensor([0.5, -1.0, 2.0, 0.25]))
        self.act: torch.nn.Module = torch.nn.ReLU()
        self.register_buffer("c", torch.tensor([1.5, 1.5, -1.0, 2.0]))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * self.a if self.a is not None else x
        y = self.act(y - 1.0)
        y = y * self.c
        return y + self.b if self.b is not None else y


def _same_as_eager(module: torch.nn.Module, compiled: Callable[..., Any], x: torch.Tensor) -> None:
    """The compiled call and the eager call of ``module`` agree on values,
    ``requires_grad`` and the parameters' gradients."""
    params = [p for p in module.parameters() if p.requires_grad]
    expected = module(x)
    e_grads = torch.autograd.grad(expected.sum(), params, allow_unused=True) if expected.requires_grad else ()
    got = compiled(x)
    assert got.requires_grad == expected.requires_grad
    torch.testing.assert_close(got, expected)
    if got.requires_grad:
        c_grads = torch.autograd.grad(got.sum(), params, allow_unused=True)
        for e, c in zip(e_grads, c_grads, strict=True):
            assert (e is None) == (c is None)
            if e is not None:
                torch.testing.assert_close(c, e)


def _compiled(module: torch.nn.Module, kind: str) -> Callable[..., Any]:
    if kind == "conveyor.compile":
        return conveyor.compile(module)
    torch._dynamo.reset()
    return torch.compile(module, backend="conveyor")


KINDS = ["conveyor.compile", "torch.compile"]


def _changes() -> list[tuple[str, Callable[[Scale], None]]]:
    def swap(m: Scale) -> None:
        m.a = torch.nn.Parameter(torch.tensor([-2.0, 1.0, 0.5, 3.0]))

    def flip(m: Scale) -> None:
        m.a.requires_grad_(False)

    def resize(m: Scale) -> None:
        buffer = m.c
        assert isinstance(buffer, torch.Tensor)
        buffer.resize_(1)  # broadcasts: a different program, the same object

    def data_strides(m: Scale) -> None:
        base = torch.tensor([[1.0, 0.0], [2.0, 0.0], [-3.0, 0.0], [4.0, 0.0]])
        m.a.data = base[:, 0]  # same size, stride 2, storage offset 0

    def data_offset(m: Scale) -> None:
        m.a.data = torch.tensor([9.0, 1.0, 2.0, 3.0, 4.0])[1:]

    def data_shared(m: Scale) -> None:
        m.b.data = m.a.data  # now a and b share a storage

    def reorder(m: Scale) -> None:
        a = m.a
        del m.a
        m.a = torch.nn.Parameter(a.detach().clone() * 3)  # re-registered: now after b

    def to_none(m: Scale) -> None:
        m.a = None  # type: ignore[assignment]

    def new_submodule(m: Scale) -> None:
        m.act = torch.nn.Tanh()  # no parameters: the lifted state is unchanged

    def new_buffer(m: Scale) -> None:
        m.register_buffer("unused", torch.zeros(2))

    def half(m: Scale) -> None:
        m.half()  # parameters by .data =, buffers replaced in the dict

    def to_double(m: Scale) -> None:
        m.to(torch.float64)

    def set_storage(m: Scale) -> None:
        buffer = m.c
        assert isinstance(buffer, torch.Tensor)
        with torch.no_grad():
            b = m.b.detach()
            buffer.set_(b.untyped_storage(), 0, b.shape, b.stride())  # the same object, now in b's storage

    def buffer_replaced(m: Scale) -> None:
        m.c = torch.tensor([[2.0], [3.0], [-1.0]])  # another shape: broadcasts differently

    def deleted_and_set(m: Scale) -> None:
        del m.act
        m.act = torch.nn.Sigmoid()

    return [
        ("parameter swapped", swap),
        ("requires_grad flipped", flip),
        ("resized in place", resize),
        (".data = strided", data_strides),
        (".data = offset", data_offset),
        (".data = shared storage", data_shared),
        ("parameter re-registered", reorder),
        ("parameter set to None", to_none),
        ("submodule replaced", new_submodule),
        ("buffer added", new_buffer),
        ("module.half()", half),
        ("module.to(float64)", to_double),
        ("buffer.set_(parameter)", set_storage),
        ("buffer replaced", buffer_replaced),
        ("submodule deleted and set", deleted_and_set),
    ]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("change", _changes(), ids=[name for name, _ in _changes()])
def test_a_change_to_the_module_is_seen_at_the_next_call(
    change: tuple[str, Callable[[Scale], None]], kind: str
) -> None:
    torch.manual_seed(0)
    module = Scale()
    compiled = _compiled(module, kind)
    x = torch.randn(3, 4)
    _same_as_eager(module, compiled, x)
    _same_as_eager(module, compiled, x)  # warm: the cached entry
    change[1](module)
    _same_as_eager(module, compiled, x)


def test_swapping_parameters_back_and_forth_reuses_the_entries() -> None:
    module = Scale()
    compiled = conveyor.compile(module)
    x = torch.randn(3, 4)
    a = module.a
    compiled(x)
    module.a = torch.nn.Parameter(torch.ones(4))  # same metadata: the same program, values read fresh
    _same_as_eager(module, compiled, x)
    module.a = a
    _same_as_eager(module, compiled, x)
    assert compiled.compiles == 1


def test_a_pair_of_none_and_tensor_parameters_swapped_compiles_again() -> None:
    module = Scale()
    module.b = None  # type: ignore[assignment]
    compiled = conveyor.compile(module)
    x = torch.randn(3, 4)
    _same_as_eager(module, compiled, x)
    module.b, module.a = module.a, None  # type: ignore[assignment]
    _same_as_eager(module, compiled, x)
    assert compiled.compiles == 2


def test_module_state_structure_follows_the_tree() -> None:
    module = Scale()
    state = ModuleState(module)
    before = state.structure
    assert [t is u for t, u in zip(state.tensors(), lifted_state(module)[1], strict=True)] == [True, True, True]
    assert state.structure == before  # nothing changed: the same structure
    module.act = torch.nn.GELU()
    state.tensors()
    assert state.structure != before
    assert state.structure[1] == tuple(lifted_state(module)[0])


def test_one_signature_per_call_describes_its_sharing() -> None:
    x = torch.randn(4)
    y = torch.randn(3, requires_grad=True)
    flat = [x, x[1:], torch.randn(2), 3, x, y * 1]
    signature = CallSignature.of(flat)
    assert signature.groups == (0, 0, 2, -1, 0, 5) and not signature.unshared and not signature.plain
    assert signature.same == (0, 1, 2, 3, 0, 5)  # the same tensor object, not only the same storage
    assert signature.overlapping == frozenset({(0, 1), (0, 4), (1, 4)})
    assert signature.offsets == (0, 1, 0, None, 0, 0)
    assert signature.leaves((5,)) == (False,)
    assert signature.offsets is signature.offsets  # computed once, kept on the call's signature
    assert cache.call_key(signature)[-1] == signature.groups
    plain = CallSignature.of([x, torch.randn(2)])
    assert plain.unshared and plain.plain and plain.same == (0, 1) and plain.overlapping == frozenset()


def test_the_fast_key_matches_tensor_key_on_what_it_distinguishes() -> None:
    p = torch.nn.Parameter(torch.randn(4, 4))
    t = torch.randn(4, 4)
    k = cache.call_key(CallSignature.of([p, t]))
    assert cache.call_key(CallSignature.of([p, t])) == k
    assert cache.call_key(CallSignature.of([t, p])) != k
    assert cache.call_key(CallSignature.of([p, t.t()])) != k  # strides
    assert cache.call_key(CallSignature.of([p, t[1:]])) != k
    assert cache.call_key(CallSignature.of([p, t.requires_grad_()])) != k
    assert cache.call_key(CallSignature.of([p, (t * 2)])) != k  # not a leaf


@pytest.mark.parametrize("kind", KINDS)
def test_no_detach_in_the_graph_of_a_call_under_no_grad(kind: str) -> None:
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.LayerNorm(8), torch.nn.Linear(8, 8), torch.nn.GELU())
    compiled = _compiled(module, kind)
    x = torch.randn(2, 8)
    with torch.no_grad():
        got = compiled(x)
        torch.testing.assert_close(got, module(x))
    assert not got.requires_grad
    final = conveyor.last_graphs(compiled)[-1].graph
    targets = [n.target for n in final.graph.nodes if n.op == "call_function"]
    assert torch.ops.aten.detach.default not in targets
    assert torch.ops.aten.linear.default in targets  # Note [Linear calls]: one call per Linear, as in eager
    # with grad on, the same module compiles again and its result carries grad
    _same_as_eager(module, compiled, x)


def test_a_no_grad_region_inside_a_grad_call_keeps_its_detach() -> None:
    w = torch.nn.Parameter(torch.randn(4))

    def fn(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            s = x * w
        return s + x * w

    compiled = conveyor.compile(fn)
    x = torch.randn(4)
    got = compiled(x)
    expected = fn(x)
    torch.testing.assert_close(got, expected)
    (g,) = torch.autograd.grad(got.sum(), [w])
    (e,) = torch.autograd.grad(expected.sum(), [w])
    torch.testing.assert_close(g, e)


def _detach_targets(gm: torch.fx.GraphModule) -> int:
    return sum(1 for n in gm.graph.nodes if n.target is torch.ops.aten.detach.default)


def test_inert_detaches_are_dropped_and_returned_ones_kept() -> None:
    from conveyor.analysis.grad_regions import drop_inert_detaches
    from torch.fx.experimental.proxy_tensor import make_fx

    def fn(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.ops.aten.detach.default(x * w)
        return h.sin() + 1, torch.ops.aten.detach.default(h)

    x, w = torch.randn(3), torch.randn(3, requires_grad=True)
    gm = make_fx(fn, decomposition_table={})(x, w)  # torch 2.14 records detach as alias without one
    assert _detach_targets(gm) == 2
    dropped = drop_inert_detaches(gm)
    assert _detach_targets(dropped) == 1  # the returned one stays
    assert _detach_targets(gm) == 2  # the request's graph is left as it was
    with torch.no_grad():
        for got, expected in zip(dropped(x, w), gm(x, w), strict=True):
            torch.testing.assert_close(got, expected)

    def writes(x: torch.Tensor) -> torch.Tensor:
        h = torch.ops.aten.detach.default(x)
        return h.mul_(2) + 1

    gm = make_fx(writes, decomposition_table={})(torch.randn(3))
    assert drop_inert_detaches(gm) is gm  # a graph that writes keeps its detaches


def test_a_training_step_matches_eager_with_detaches_dropped() -> None:
    torch.manual_seed(0)
    module = torch.nn.Sequential(
        *(torch.nn.Sequential(torch.nn.LayerNorm(8), torch.nn.Linear(8, 8), torch.nn.GELU()) for _ in range(2))
    )
    compiled = conveyor.compile(module)
    x = torch.randn(4, 8)
    for _ in range(2):
        _same_as_eager(module, compiled, x)
