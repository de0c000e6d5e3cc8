"""Tensor subclasses through the pipeline (Note [Tensor subclasses]):
traceable wrapper subclasses are desugared into their inner tensors for the
stages and rebuilt at the boundary, gradients flowing as in eager."""

import warnings

import conveyor
import pytest
import torch
from torch.testing._internal.two_tensor import TwoTensor


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def two(*shape, requires_grad=False):
    t = TwoTensor(torch.randn(*shape), torch.randn(*shape))
    return t.requires_grad_(requires_grad)


class Scale(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(two(4, 3))

    def forward(self, x):
        return torch.tanh(x @ self.w) * 2


ENTRY_POINTS = {
    "conveyor.compile": conveyor.compile,
    "torch.compile": lambda fn: torch.compile(fn, backend="conveyor"),
}


def assert_two_close(actual, expected):
    assert type(actual) is TwoTensor, type(actual)
    torch.testing.assert_close(actual.a, expected.a)
    torch.testing.assert_close(actual.b, expected.b)


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_subclass_inputs_outputs_and_gradients_match_eager(entry):
    def f(x, y):
        return (x * y).sin() + x, y.sum()

    x, y = two(3, 4, requires_grad=True), two(3, 4, requires_grad=True)
    x2, y2 = (t.detach().clone().requires_grad_() for t in (x, y))
    outs, ref = ENTRY_POINTS[entry](f)(x2, y2), f(x, y)
    for o, r in zip(outs, ref, strict=True):
        assert_two_close(o, r)
    (ref[0].sum() + ref[1]).backward()
    (outs[0].sum() + outs[1]).backward()
    assert_two_close(x2.grad, x.grad)
    assert_two_close(y2.grad, y.grad)


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_subclass_parameters_train_as_in_eager(entry):
    torch.manual_seed(0)
    model = Scale()
    mirror = Scale()
    mirror.load_state_dict(model.state_dict())
    compiled = ENTRY_POINTS[entry](mirror)
    for _ in range(2):
        x = torch.randn(2, 4)
        model(x).sum().backward()
        compiled(x).sum().backward()
        assert_two_close(mirror.w.grad, model.w.grad)
        with torch.no_grad():
            for m in (model, mirror):
                m.w -= 0.1 * m.w.grad
                m.w.grad = None
    assert_two_close(mirror.w.detach(), model.w.detach())


def test_subclass_graph_holds_only_inner_tensors():
    f = conveyor.compile(lambda x: x * 2)
    out = f(two(3))
    assert type(out) is TwoTensor
    graph = conveyor.last_graphs(f)[0].graph
    vals = [n.meta["val"] for n in graph.graph.nodes if n.op == "placeholder"]
    assert len(vals) == 2 and all(type(v).__name__ == "FakeTensor" for v in vals)


class Opaque(torch.Tensor):
    """A wrapper that dispatches on its own but cannot be flattened."""

    @staticmethod
    def __new__(cls, elem):
        return torch.Tensor._make_wrapper_subclass(cls, elem.shape, dtype=elem.dtype)

    def __init__(self, elem):
        self.elem = elem

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        def unwrap(t):
            return t.elem if isinstance(t, Opaque) else t

        tree_map = torch.utils._pytree.tree_map
        return func(*tree_map(unwrap, args), **tree_map(unwrap, kwargs or {}))


def test_a_subclass_that_cannot_be_flattened_is_a_clear_error():
    # a fake of it would be a plain tensor: its own dispatch would be lost
    f = conveyor.compile(lambda t: t + 1)
    with pytest.raises(conveyor.CaptureError, match=r"Opaque has its own __torch_dispatch__ but no __tensor_flatten__"):
        f(Opaque(torch.randn(3)))


def test_a_nested_subclass_runs_eagerly_with_a_warning():
    inner = TwoTensor(torch.randn(3), torch.randn(3))
    x = TwoTensor(inner, inner.clone())
    f = conveyor.compile(lambda t: t * 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = f(x)
    assert_two_close(out, x * 2)
    assert any("TwoTensor holds tensor subclasses" in str(w.message) for w in caught)


class StraightThrough(torch.autograd.Function):
    """round() forward, identity backward: a gradient the aten ops do not give."""

    @staticmethod
    def forward(ctx, x):
        return torch.round(x)

    @staticmethod
    def backward(ctx, grad):
        return grad


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_a_subclass_program_in_training_keeps_its_own_autograd(entry):
    # Note [Subclass programs in training]: the backward is traced at the subclass level
    def f(x):
        return StraightThrough.apply(x * 3).sum()

    x = two(5, requires_grad=True)
    x2 = x.detach().clone().requires_grad_()
    out, ref = ENTRY_POINTS[entry](f)(x2), f(x)
    assert_two_close(out, ref)
    ref.backward()
    out.backward()
    assert_two_close(x2.grad, x.grad)  # 3 everywhere, not round()'s zero gradient


def test_double_backward_through_a_subclass_program_is_a_clear_error():
    x = two(3, requires_grad=True)
    out = conveyor.compile(lambda t: (t * t).sum())(x)
    (g,) = torch.autograd.grad(out, x, create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable|does not require grad"):
        torch.autograd.grad(g.sum(), x)


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_a_subclass_the_program_builds_from_plain_inputs(entry, grad):
    """Note [Subclasses the program makes]: before, both entry points
    returned the TwoTensor built during the trace, around fake tensors
    (h_sweep4 B8)."""

    def f(a, b):
        return TwoTensor(a * 2, b + 1).sin(), a.sum()

    a, b = torch.randn(3, requires_grad=grad), torch.randn(3, requires_grad=grad)
    a2, b2 = (t.detach().clone().requires_grad_(grad) for t in (a, b))
    compiled = ENTRY_POINTS[entry](f)
    for _ in range(2):
        out, ref = compiled(a2, b2), f(a, b)
        assert_two_close(out[0], ref[0])
        assert type(out[0].a) is torch.Tensor and type(out[0].b) is torch.Tensor
        torch.testing.assert_close(out[1], ref[1])
    if grad:
        (ref[0].sum() + ref[1]).backward()
        (out[0].sum() + out[1]).backward()
        torch.testing.assert_close((a2.grad, b2.grad), (a.grad, b.grad))


class _Tagged(torch.Tensor):
    """A subclass with only ``__torch_function__`` (its ops return it)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return super().__torch_function__(func, types, args, kwargs or {})


def test_a_torch_function_subclass_input_keeps_its_type():
    """Note [Subclasses with only __torch_function__]: before, the outputs
    came back plain tensors (h_sweep4 B9)."""

    def f(x):
        return x.exp() + 1, x.t()

    x = torch.randn(3, 3).as_subclass(_Tagged)
    with pytest.warns(UserWarning, match="through dynamo.*_Tagged"):
        outs = conveyor.compile(f)(x)
    for o, r in zip(outs, f(x), strict=True):
        assert type(o) is _Tagged
        torch.testing.assert_close(o.as_subclass(torch.Tensor), r.as_subclass(torch.Tensor))


def test_as_subclass_inside_the_program_compiles_through_dynamo():
    """Note [as_subclass inside a capture]: before, torch's RuntimeError
    (the fake tensor already has a Python object) reached the caller
    (h_sweep4 B9, second half)."""

    def f(x):
        return x.as_subclass(_Tagged).sin() * 2

    x = torch.randn(3, 3)
    with pytest.warns(UserWarning, match="through dynamo.*as_subclass"):
        out = conveyor.compile(f)(x)
    assert type(out) is _Tagged
    torch.testing.assert_close(out.as_subclass(torch.Tensor), f(x).as_subclass(torch.Tensor))
