"""The checker must catch each kind of planted bug, and pass the honest compile."""

import pytest
import torch
from conveyor.testing import check, clone_inputs


def planted(bug):
    return lambda fn: (lambda *args: bug(fn, *args))


def test_catches_a_wrong_output():
    with pytest.raises(AssertionError, match="output 0"):
        check(lambda x: x * 2, torch.randn(3), compile=planted(lambda f, x: f(x) + 1e-3))


def test_float8_outputs_are_compared_under_the_tolerance_given():
    """assert_close refuses a tolerance for float8 tensors: the checker compares
    their values in float32 (cpu repro sweep: ``x.to(torch.float8_e4m3fn)``)."""
    for dtype in (torch.float8_e4m3fn, torch.float8_e5m2):
        check(lambda x, dt=dtype: x.to(dt), torch.rand(8) > 0.5, atol=1e-5, rtol=1e-5)
        with pytest.raises(AssertionError, match="output 0"):
            check(lambda x, dt=dtype: x.to(dt), torch.randn(8), compile=planted(lambda f, x: f(x + 1)), atol=1e-5, rtol=1e-5)


def test_catches_a_missed_input_mutation():
    def f(x):
        x.add_(1)
        return x.sum()

    with pytest.raises(AssertionError, match="input 0 after the call"):
        check(f, torch.randn(3), compile=planted(lambda f, x: f(x.clone())))


def test_catches_a_wrong_alias_relation():
    with pytest.raises(AssertionError, match="output 0 aliasing"):
        check(lambda x: x.view(-1), torch.randn(2, 2), compile=planted(lambda f, x: f(x).clone()))


def test_catches_an_output_that_should_be_the_input_object():
    with pytest.raises(AssertionError, match="output 0 aliasing"):
        check(lambda x: x, torch.randn(2), compile=planted(lambda f, x: x.view_as(x)))


def test_catches_a_wrong_gradient():
    def extra_grad(f, x):
        return f(x) + (x * x - (x * x).detach())

    with pytest.raises(AssertionError, match="gradient 0"):
        check(lambda x: x.sin(), torch.randn(3, requires_grad=True), compile=planted(extra_grad))


def test_catches_wrong_strides_and_metadata():
    with pytest.raises(AssertionError, match="strides"):
        check(lambda x: x.t(), torch.randn(2, 3), compile=planted(lambda f, x: f(x).contiguous()))

    def f(x):
        x.t_()
        return x + 1

    with pytest.raises(AssertionError, match="input 0 after the call: shape"):
        check(f, torch.randn(2, 3), compile=planted(lambda f, x: f(x.view_as(x))))


def test_output_strides_are_compared_where_a_dimension_is_longer_than_1():
    """Note [Significant strides]: a size-1 dimension's stride is free."""
    x = torch.randn(2, 2).as_strided((1, 2), (1, 1), 0)
    assert (x * 1).stride() == (1, 1) and (x - x).stride() == (2, 1)  # eager's own kernels differ
    checked = check(lambda x: x * 1, x, compile=planted(lambda f, x: torch.empty(1, 2).copy_(f(x))))
    assert checked.compiled_out.stride() == (2, 1)
    with pytest.raises(AssertionError, match="output 0: strides"):
        check(lambda x: x * 1, torch.randn(1, 2, 3), compile=planted(lambda f, x: f(x).transpose(1, 2).contiguous().transpose(1, 2)))


def test_exceptions_must_match():
    def f(x):
        x.add_(1)  # a leaf that requires grad: eager raises
        return x

    check(f, torch.randn(2, requires_grad=True), compile=lambda fn: fn)
    with pytest.raises(AssertionError, match="compiled did not"):
        check(f, torch.randn(2, requires_grad=True), compile=planted(lambda f, x: f(x.detach().clone())))


def test_clones_keep_views_sharing_and_leafness():
    base = torch.randn(4, 4, requires_grad=True)
    other = torch.randn(3)
    a, b, c, d = clone_inputs([base, base[1], base.t(), other])
    assert a.is_leaf and a.requires_grad and a is not base
    assert b._base is a and c._base is a and not b.is_leaf
    assert b.untyped_storage()._cdata == a.untyped_storage()._cdata
    assert d.untyped_storage()._cdata != other.untyped_storage()._cdata
    assert (b.storage_offset(), c.stride()) == (4, (1, 4))
    torch.testing.assert_close(b, base[1])


def test_honest_compile_passes_with_mutation_views_and_grads():
    def f(x, y):
        y.mul_(2)
        return x.t(), x * y.sum()

    check(f, torch.randn(2, 3, requires_grad=True), torch.randn(3), compile=lambda fn: fn)


def test_gradients_of_a_mutated_non_leaf_input_reach_its_leaf():
    def f(x):
        x.mul_(2)
        return x.sin()

    x = torch.randn(3, requires_grad=True) * 1
    check(f, x, compile=lambda fn: fn)  # honest: passes

    with pytest.raises(AssertionError, match="gradient 0"):
        check(f, torch.randn(3, requires_grad=True) * 1, compile=planted(lambda f, x: _scaled_grad(f(x), 0.5)))


def test_complex_outputs_are_differentiated_through_a_real_loss():
    def f(x):
        return torch.view_as_complex(x).exp()

    check(f, torch.randn(3, 2, requires_grad=True), compile=lambda fn: fn)
    with pytest.raises(AssertionError, match="gradient 0"):
        check(f, torch.randn(3, 2, requires_grad=True), compile=planted(lambda f, x: _scaled_grad(f(x), 0.5j)))


def test_a_missing_gradient_must_be_missing_on_the_other_side():
    """No gradient and a zero one differ: an optimizer skips the first and
    moves the second (weight decay, momentum)."""
    x, y = torch.randn(3, requires_grad=True), torch.randn(3, requires_grad=True)
    check(lambda x, y: x.detach() * 0 + y, x, y, compile=lambda fn: fn)  # honest: none on both sides
    with pytest.raises(AssertionError, match="gradient 0: eager has a gradient, the other none"):
        check(lambda x, y: x * 0 + y, x, y, compile=planted(lambda f, x, y: x.detach() * 0 + y))
    with pytest.raises(AssertionError, match="gradient 0"):
        check(lambda x, y: x + y, x, y, compile=planted(lambda f, x, y: x.detach() + y))


def test_a_backward_that_fails_in_eager_must_fail_compiled():
    def f(x):
        y = x.sin()
        out = y.exp()  # saves its result
        out.mul_(2)  # and changes it: eager's backward raises
        return out

    check(f, torch.randn(3, requires_grad=True), compile=lambda fn: fn)
    with pytest.raises(AssertionError, match="eager backward raised"):
        check(f, torch.randn(3, requires_grad=True), compile=planted(lambda f, x: x.sin().exp() * 2))


def _scaled_grad(out, extra):
    """``out`` by value; its gradient scaled by ``1 + extra``."""
    return out + extra * (out - out.detach())


def test_inputs_viewing_a_base_of_another_dtype_are_cloned_in_their_own_dtype() -> None:
    c = torch.randn(3, 2, dtype=torch.complex128, requires_grad=True) * 1
    f = torch.randn(4, 2, dtype=torch.float64)
    views = [torch.view_as_real(c)[1:], c.imag, c.real, torch.view_as_complex(f), f.view(torch.int64)]
    clones = clone_inputs(views)
    for v, k in zip(views, clones, strict=True):
        assert (k.dtype, k.shape, k.stride(), k.storage_offset()) == (v.dtype, v.shape, v.stride(), v.storage_offset())
        assert torch.equal(k, v) and k.requires_grad == v.requires_grad
    assert clones[0].untyped_storage()._cdata == clones[1].untyped_storage()._cdata  # one clone of c
    import conveyor

    check(lambda t, u: (t * 2, u.sum()), clones[0], clones[1], compile=conveyor.compile)


def test_subclass_inputs_are_cloned_as_themselves() -> None:
    """A wrapper subclass's storage is none of its data's: cloning it through
    the storage raised "invalid python storage" (h_sweep4)."""
    from torch.testing._internal.two_tensor import TwoTensor

    x = TwoTensor(torch.randn(3), torch.randn(3)).requires_grad_()
    (c,) = clone_inputs([x])
    assert type(c) is TwoTensor and c.requires_grad and c.is_leaf
    torch.testing.assert_close(c.a, x.a)
    torch.testing.assert_close(c.b, x.b)
    check(lambda a, b: (a * b).sin() + a, x, TwoTensor(torch.randn(3), torch.randn(3)))
