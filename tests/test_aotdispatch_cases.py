"""Mutation and aliasing cases ported from PyTorch's AOTAutograd tests.

Origin: pytorch/pytorch, test/functorch/test_aotdispatch.py, class
``TestAOTAutograd`` (the ``test_input_mutation_*``, ``test_output_aliases_*``,
``test_input_output_*``, ``test_*_metadata_mutation*``, ``test_set__*``,
``test_batchnorm*``, ``test_no_grad_*``, ``test_inference_mode``,
``test_view_and_inplace_view``, ``test_dupe_*``, ``test_output_op_depending_on_symint``
... cases). Each case below keeps the original test's name (without the
``test_`` prefix) and the program it compiles; the inputs are built as the
original builds them (``test_mutation=True`` there means the graph inputs are
non-leaves, ``x.add(1)``, so they may be mutated), with and without
``requires_grad`` where the original runs both.

Instead of ``aot_function`` + ``verify_aot_autograd`` (and the expected
graphs, which are AOTAutograd's own), every case runs through
``conveyor.compile`` with the full installed pipeline and the eager backend,
and is compared with eager by ``conveyor.testing.check`` (outputs, output /
input aliasing, inputs after the call, gradients of the leaves behind the
inputs). Where the original goes on to mutate the outputs it got back
(``test_mutation=True``), ``check_output_mutation`` does the same on both
sides and compares again. Each case is checked twice on one compiled
function (the second call runs the cached specialization), and once more
under ``torch.no_grad()`` and ``torch.inference_mode()`` (``test_case_grad_mode``).

Cases named ``regression_*`` are not from PyTorch: each pins a bug these
cases (or random aliasing programs built from the same ingredients) found in
a stage, and says which.

Strict xfails name the stage at fault and the exact cause.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import conveyor
import pytest
import torch
import torch.utils._pytree as pytree
from conveyor.testing import check
from torch import nn


def compile_eager(fn: Callable[..., Any]) -> Any:
    return conveyor.compile(fn, backend="eager")


# -- helpers ----------------------------------------------------------------


def nonleaf(*shapes_or_tensors: Any, req_grad: bool) -> list[torch.Tensor]:
    """``torch.ones(shape, requires_grad=req_grad).add(1)`` for each shape:
    graph inputs that may be mutated (what ``test_mutation=True`` builds)."""
    out = []
    for s in shapes_or_tensors:
        t = s if isinstance(s, torch.Tensor) else torch.ones(*s)
        out.append(t.detach().clone().requires_grad_(req_grad).add(1))
    return out


def check_output_mutation(fn: Callable[..., Any], make: Callable[[], list[Any]]) -> None:
    """Run eager and compiled on fresh inputs, then mutate every output in
    place (``mul_(2)``), as ``verify_aot_autograd(test_mutation=True)`` does;
    the outputs and inputs must agree afterwards, and an output that eager
    refuses to mutate must be refused by the compiled program too."""
    torch.manual_seed(0)
    e_in = make()
    torch.manual_seed(0)
    c_in = make()
    e_out = fn(*e_in)
    c_out = compile_eager(fn)(*c_in)
    e_flat, c_flat = pytree.tree_leaves(e_out), pytree.tree_leaves(c_out)
    assert len(e_flat) == len(c_flat)
    for i, (e, c) in enumerate(zip(e_flat, c_flat, strict=True)):
        if isinstance(e, torch.Tensor):  # before any mutation invalidates a multi-output view's grad_fn
            assert c.requires_grad == e.requires_grad, f"output {i}: requires_grad"
            assert c.is_leaf == e.is_leaf, f"output {i}: is_leaf {c.is_leaf} != eager {e.is_leaf}"
    for e, c in zip(e_flat, c_flat, strict=True):
        if not isinstance(e, torch.Tensor):
            continue
        try:
            e.mul_(2)
        except RuntimeError:
            with pytest.raises(RuntimeError):
                c.mul_(2)
            continue
        c.mul_(2)
    for i, (e, c) in enumerate(zip(e_flat, c_flat, strict=True)):
        if isinstance(e, torch.Tensor):
            torch.testing.assert_close(c.detach(), e.detach(), msg=lambda m, i=i: f"output {i} after mutation: {m}")
    for j, (e, c) in enumerate(zip(pytree.tree_leaves(e_in), pytree.tree_leaves(c_in), strict=True)):
        if isinstance(e, torch.Tensor):
            torch.testing.assert_close(c.detach(), e.detach(), msg=lambda m, j=j: f"input {j} after mutation: {m}")


def run(fn: Callable[..., Any], make: Callable[[bool], list[Any]], req_grads: tuple[bool, ...] = (False, True)) -> None:
    """The shared checker on ``make(req_grad)`` for each ``req_grad``, then the
    output-mutation check."""
    for rg in req_grads:
        compiled = compile_eager(fn)
        for _ in range(2):  # the second call runs the cached specialization
            torch.manual_seed(0)
            check(fn, *make(rg), compile=lambda _fn, compiled=compiled: compiled)
        check_output_mutation(fn, lambda rg=rg: make(rg))


# -- the programs ----------------------------------------------------------
# Each entry: name -> (fn, make_inputs(req_grad), req_grad values).

CASES: dict[str, tuple[Callable[..., Any], Callable[[bool], list[Any]], tuple[bool, ...]]] = {}


def case(name: str, make: Callable[[bool], list[Any]], req_grads: tuple[bool, ...] = (False, True)):
    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        assert name not in CASES, name
        CASES[name] = (fn, make, req_grads)
        return fn

    return register


def ones_nonleaf(*shapes: tuple[int, ...]) -> Callable[[bool], list[Any]]:
    return lambda rg: nonleaf(*shapes, req_grad=rg)


def ones_leaf(*shapes: tuple[int, ...]) -> Callable[[bool], list[Any]]:
    return lambda rg: [torch.ones(*s, requires_grad=rg) for s in shapes]


def randn_leaf(*shapes: tuple[int, ...]) -> Callable[[bool], list[Any]]:
    return lambda rg: [torch.randn(*s, requires_grad=rg) for s in shapes]


@case("single_output", lambda rg: [torch.randn(3, 3, requires_grad=rg), torch.randn(3, 3)])
def _single_output(a, b):
    return a + b


@case("multi_output", lambda rg: [torch.randn(3, 3, requires_grad=rg), torch.randn(3, 3)])
def _multi_output(a, b):
    return a + b, a - b


@case("multi_output_list", lambda rg: [torch.randn(3, 3, requires_grad=rg), torch.randn(3, 3)])
def _multi_output_list(a, b):
    return [a + b, a - b]


@case("squeeze_mutation", randn_leaf((3, 1)))
def _squeeze_mutation(a):
    b = a.clone().squeeze(-1)
    b.add_(1.0)
    return a + b


@case("input_mutation_simple", ones_nonleaf((3, 3)))
def _input_mutation_simple(a):
    a.mul_(2)
    return a * 3


@case("input_mutation_set__input_mutation", ones_nonleaf((3, 3)))
def _input_mutation_set__input_mutation(a):
    b = torch.arange(9, dtype=a.dtype).reshape(3, 3)
    with torch.no_grad():
        a.set_(b)
    return a * b


@case("set__steals_view_chain", lambda rg: [torch.ones(3, 3), torch.zeros(3, 9)], (False,))
def _set__steals_view_chain(a, b):
    a_ = a.mul(2)
    b_ = b.mul(2)
    b_slice = b_[1].view(3, 3)
    a_.set_(b_slice)
    a_.view(-1).mul_(2)
    return a_ * b_slice


@case("set__and_data_mutation_good", lambda rg: nonleaf(torch.ones(3, 3), torch.zeros(3, 3), req_grad=rg))
def _set__and_data_mutation_good(a, b):
    with torch.no_grad():
        a.set_(b)
    b.mul_(2)
    return a + b


@case("input_mutation_set__nop", ones_nonleaf((3, 3)))
def _input_mutation_set__nop(a):
    b = torch.arange(9, dtype=a.dtype)
    a_old = torch.ops.aten.alias.default(a)
    with torch.no_grad():
        a.set_(b)
        a.set_(a_old)
    return a + b.reshape(3, 3)


@case("input_mutation_simple_with_none_and_nontensor", lambda rg: [torch.ones(3, 3, requires_grad=rg), None, 3])
def _input_mutation_simple_with_none_and_nontensor(a, b, c):
    return a * c


@case("non_tensor_and_none_inputs", lambda rg: [2, None, torch.ones(3, 3, requires_grad=rg)])
def _non_tensor_and_none_inputs(a, b, c):
    return a * c


@case("mutates_input_noncontiguous", lambda rg: [nonleaf((4,), req_grad=rg)[0][0::2]])
def _mutates_input_noncontiguous(a):
    a.add_(1)
    return ()


@case("input_mutation_modifies_autograd_meta_of_aliases", ones_nonleaf((3, 3)))
def _input_mutation_modifies_autograd_meta_of_aliases(a):
    a.mul_(2)
    out = a + 1
    return out.detach()


@case("outputs_are_aliased", ones_leaf((3,)))
def _outputs_are_aliased(a):
    b = a.mul(2)
    c = b.view(-1)
    return b, c


@case("input_mutation_is_output", ones_nonleaf((3, 3)))
def _input_mutation_is_output(a):
    a.mul_(2)
    return a


@case("input_mutation_multiple", ones_nonleaf((3, 3), (3, 3), (3, 3)))
def _input_mutation_multiple(a, b, c):
    a.mul_(2)
    c.mul_(2)
    return a + b + c


@case("input_mutation_metadata", ones_nonleaf((3, 3), (3, 3)))
def _input_mutation_metadata(a, b):
    a.transpose_(1, 0)
    return a + b


@case("input_mutation_requires_grad_detach", ones_leaf((4,)), (True,))
def _input_mutation_requires_grad_detach(a):
    a.detach().mul_(2)
    return a + 3


CASES["input_mutation_requires_grad_detach_nonleaf"] = (_input_mutation_requires_grad_detach, ones_nonleaf((4,)), (True,))


@case("input_mutation_requires_grad_no_grad", ones_nonleaf((4,)), (True,))
def _input_mutation_requires_grad_no_grad(a):
    with torch.no_grad():
        a.mul_(2)
    return a + 3


@case("input_mutation_requires_grad_no_grad_inference_graph", ones_nonleaf((4,)), (True,))
def _input_mutation_requires_grad_no_grad_inference_graph(a):
    with torch.no_grad():
        a.mul_(2)
        return a + 3


@case("input_mutation_requires_grad_no_grad_detach_mixed", ones_nonleaf((4,)), (True,))
def _input_mutation_requires_grad_no_grad_detach_mixed(a):
    a.detach().mul_(2)
    a.mul_(3)
    with torch.no_grad():
        a.mul_(4)
    return a + 5


@case("input_mutation_metadata2", ones_nonleaf((3, 3)))
def _input_mutation_metadata2(a):
    a.transpose_(1, 0)
    a.mul_(2)
    return a + 1


def _bn_inputs(rg: bool) -> list[Any]:
    return [
        *nonleaf((2, 5, 5, 5), (5,), (5,), req_grad=rg),
        *nonleaf((5,), (5,), req_grad=False),
    ]


@case("input_mutation_batchnorm", _bn_inputs)
def _input_mutation_batchnorm(inpt, weight, bias, running_mean, running_var):
    return torch._native_batch_norm_legit(inpt, weight, bias, running_mean, running_var, True, 0.5, 1e-5)


@case("input_output_view_simple", ones_nonleaf((2, 2)))
def _input_output_view_simple(a):
    return a.view(-1)


@case("input_output_view_mutate_multiple", ones_nonleaf((2, 2), (2, 2), (2, 2)))
def _input_output_view_mutate_multiple(a, b, c):
    a.mul_(2)
    c.mul_(3)
    return b.view(2, 2), c.view(2, 2)


@case("input_output_view_metadata_mutate_multiple", ones_nonleaf((2, 2), (2, 2), (2, 2)))
def _input_output_view_metadata_mutate_multiple(a, b, c):
    b.mul_(3)
    c.t_()
    return a.view(2, 2), b.view(2, 2), c.view(2, 2)


@case("input_mutation_and_output_view", ones_nonleaf((2, 2)))
def _input_mutation_and_output_view(a):
    a.add_(1)
    return a.view(-1)


def _output_view_multiple_inputs(rg: bool) -> list[Any]:
    ar = torch.arange(4, dtype=torch.float32)
    return nonleaf(ar.view(2, 2), ar.view(2, 2), torch.ones(2, 2), torch.ones(2, 2), req_grad=rg)


@case("input_mutation_output_view_multiple", _output_view_multiple_inputs)
def _input_mutation_output_view_multiple(a, b, c, d):
    b.transpose_(1, 0)
    c.add_(1)
    return d + 1, b.diagonal(), a + c


@case("output_aliases_intermediate_single", ones_leaf((3, 3)))
def _output_aliases_intermediate_single(a):
    out = torch.mul(a, 3)
    return out.view(-1)


@case("output_aliases_input_multi_output_view", ones_leaf((3, 3)), (True,))
def _output_aliases_input_multi_output_view(a):
    return list(a.unbind(0))


@case("output_aliases_input_multi_output_view_and_view", ones_nonleaf((3, 3)), (True,))
def _output_aliases_input_multi_output_view_and_view(a):
    return *list(a.unbind(0)), a.view(a.shape)


@case("output_aliases_intermediate_multi_output_view", ones_leaf((3, 3)), (True,))
def _output_aliases_intermediate_multi_output_view(a):
    out = torch.mul(a, 3)
    return list(out.unbind(0))


@case("output_aliases_intermediate_multi_output_view_and_base", ones_leaf((3, 3)), (True,))
def _output_aliases_intermediate_multi_output_view_and_base(a):
    out = torch.mul(a, 3)
    return *list(out.unbind(0)), out


@case("output_aliases_intermediate_multi_output_view_and_view", ones_leaf((3, 3)), (True,))
def _output_aliases_intermediate_multi_output_view_and_view(a):
    out = torch.mul(a, 3)
    return *list(out.unbind(0)), out.view(out.shape)


@case("output_aliases_intermediate_multi_output_view_base_and_view", ones_leaf((3, 3)), (True,))
def _output_aliases_intermediate_multi_output_view_base_and_view(a):
    out = torch.mul(a, 3)
    return *list(out.unbind(0)), out, out.view(out.shape)


@case("output_aliases_intermediate_mutation_linear", ones_leaf((3, 3)), (True,))
def _output_aliases_intermediate_mutation_linear(x):
    return (x + 1).view(-1)


@case("output_aliases_intermediate_no_grad", lambda rg: [torch.ones(3, 3), torch.ones(3, 3, requires_grad=rg)])
def _output_aliases_intermediate_no_grad(a, b):
    out = torch.mul(a, 3)
    return out.view(-1), b.add(1)


@case("output_aliases_intermediate_returned_multiple_times", ones_leaf((3, 3)))
def _output_aliases_intermediate_returned_multiple_times(a):
    out = torch.mul(a, 3)
    out_view = out.view(-1)
    return out, out_view, out


@case("output_aliases_intermediate_multiple", ones_leaf((3, 3)))
def _output_aliases_intermediate_multiple(a):
    out = torch.mul(a, 3)
    return out.view(-1), out.view(-1)


@case("output_aliases_intermediate_and_returned", ones_leaf((3, 3)))
def _output_aliases_intermediate_and_returned(a):
    out = torch.mul(a, 3)
    return out.view(-1), out


@case("output_aliases_intermediate_and_returned_flipped", ones_leaf((3, 3)))
def _output_aliases_intermediate_and_returned_flipped(a):
    out = torch.mul(a, 3)
    return out, out.view(-1)


@case("output_aliases_intermediate_and_returned_different_grad", ones_leaf((3, 3)))
def _output_aliases_intermediate_and_returned_different_grad(a):
    out = torch.mul(a, 3)
    return out.view(-1), out, out[0].detach()


@case("output_aliases_intermediate_inplace_view", ones_leaf((2, 4)))
def _output_aliases_intermediate_inplace_view(a):
    out = torch.mul(a, 3)
    out.t_()
    return out


@case("output_aliases_intermediate_inplace_view_with_detach", ones_leaf((2, 4)))
def _output_aliases_intermediate_inplace_view_with_detach(a):
    out = torch.mul(a, 3)
    out.t_()
    out.detach_()
    return out, a + 1


@case("output_aliases_intermediate_inplace_view_and_view", ones_leaf((2, 4)))
def _output_aliases_intermediate_inplace_view_and_view(a):
    out = torch.mul(a, 3)
    out_view = out.unsqueeze(0)
    out.t_()
    out_view2 = out.unsqueeze(0)
    return out_view, out, out_view2


@case("output_aliases_intermediate_multiple_mixed", ones_leaf((3, 3)))
def _output_aliases_intermediate_multiple_mixed(a):
    out1 = torch.mul(a, 3)
    out2 = torch.mul(a, 4)
    return out1.view(-1), out2.transpose(1, 0), out1.transpose(1, 0)


@case("output_all_alias_types", lambda rg: [torch.ones(1, 2, 4, requires_grad=rg).clone()])
def _output_all_alias_types(a):
    a.transpose_(1, 0)
    tmp = a.mul(2)
    return tmp.squeeze(), tmp.transpose(1, 0), a.unsqueeze(0)


@case("input_data_and_metadata_mutation", ones_nonleaf((3, 3)))
def _input_data_and_metadata_mutation(a):
    a.t_()
    a[0].mul_(2)
    return a.view(a.shape)


@case("view_and_inplace_view", ones_nonleaf((3, 3), (3, 3)))
def _view_and_inplace_view(a, b):
    a.t_()
    return b.view(b.shape), a.view(a.shape)


@case("view_detach", ones_nonleaf((3, 3)))
def _view_detach(a):
    tmp = a.detach()
    a.mul_(2)
    return a, tmp


@case("input_inplace_requires_grad_true", lambda rg: nonleaf((3, 3), req_grad=False) + nonleaf((3, 3), req_grad=True), (True,))
def _input_inplace_requires_grad_true(a, b):
    a.requires_grad_(True)
    return a.mul(3), b.mul(4)


def _two_views_of(rg: bool, shape: tuple[int, ...], views: Callable[[torch.Tensor], list[torch.Tensor]]) -> list[Any]:
    base = torch.ones(*shape, requires_grad=rg)
    return views(base.add(1))


@case("input_data_and_metadata_mutation_aliases_other_input", lambda rg: _two_views_of(rg, (2, 2), lambda x: [x[0], x[0]]))
def _input_data_and_metadata_mutation_aliases_other_input(a, b):
    a.mul_(2)
    b.t_()
    return a.mul(b)


@case("input_mutation_noncontiguous", lambda rg: _two_views_of(rg, (2, 2), lambda x: [x[:, 0]]))
def _input_mutation_noncontiguous(a):
    a.mul_(2)
    return a + 1


@case("output_aliases_multiple_inputs_get_correct_one", lambda rg: _two_views_of(rg, (2, 2), lambda x: [x.view(-1), x[0]]))
def _output_aliases_multiple_inputs_get_correct_one(a, b):
    return a.view(a.shape), b.view(b.shape)


@case("input_mutation_aliases_other_input", lambda rg: _two_views_of(rg, (4, 2), lambda x: [x[0], x[0]]))
def _input_mutation_aliases_other_input(a, b):
    a.add_(1)
    return a + b


@case("input_mutation_aliases_other_input2", lambda rg: _two_views_of(rg, (2, 2), lambda x: [x[0], x]))
def _input_mutation_aliases_other_input2(a, b):
    a.add_(1)
    return a + b


@case("input_mutation_aliases_and_output_alias", lambda rg: _two_views_of(rg, (2, 2), lambda x: [x.view(-1), x.view(-1)]))
def _input_mutation_aliases_and_output_alias(a, b):
    a.add_(1)
    return b.view(b.shape)


def _aliased_with_mutation_output_alias_inputs(rg: bool) -> list[Any]:
    x = torch.ones(2, 2, requires_grad=rg).add(1)
    y = torch.ones(2, 2, requires_grad=rg).add(1)
    return [x.view(-1), y, x.view(-1)]


@case("input_aliased_with_mutation_output_alias", _aliased_with_mutation_output_alias_inputs)
def _input_aliased_with_mutation_output_alias(a, b, c):
    c.mul_(2)
    return b.add(1), c.view(-1)


@case("input_metadata_mutation_aliases", lambda rg: _two_views_of(rg, (2, 2), lambda x: [x.view(-1), x.view(-1)]))
def _input_metadata_mutation_aliases(a, b):
    a.t_()
    return a + b


def _none_require_gradients_inputs(rg: bool) -> list[Any]:
    x = torch.ones(2, 2).add(1)
    c = torch.ones(2, 2, requires_grad=rg)
    return [x.view(-1), x.view(-1), c]


@case("input_mutation_aliases_and_none_require_gradients", _none_require_gradients_inputs)
def _input_mutation_aliases_and_none_require_gradients(a, b, c):
    a.mul_(2)
    return b + 1, c + 1


def _bases_out_of_order_inputs(rg: bool) -> list[Any]:
    x1 = torch.ones(2, 2, requires_grad=rg).add(1)
    x2 = torch.ones(2, 2, requires_grad=rg).add(1)
    return [x1.view(-1), x2.view(-1), x1.view(-1), x2.view(-1)]


@case("input_mutation_aliases_bases_out_of_order", _bases_out_of_order_inputs)
def _input_mutation_aliases_bases_out_of_order(a, b, c, d):
    b.add_(1)
    d.unsqueeze_(0)
    return a + c + d, b.view(-1)


def _base_attribute_is_none_inputs(rg: bool) -> list[Any]:
    base = torch.ones(4, 4)
    return [base[0].detach(), base[1].detach()]


@case("synthetic_base_base_attribute_is_none", _base_attribute_is_none_inputs, (False,))
def _synthetic_base_base_attribute_is_none(a, b):
    a.add_(1)
    return a + b


def _alias_everything_inputs(rg: bool) -> list[Any]:
    base1_ = torch.ones(2, 2, requires_grad=rg).add(1)
    base2_ = torch.ones(2, 2, requires_grad=rg).add(1)
    return [base1_.view(-1), base2_, base1_.view(-1)]


@case("input_mutation_alias_everything", _alias_everything_inputs)
def _input_mutation_alias_everything(a, b, c):
    c.mul_(2)
    b.t_()
    tmp = a + c
    out1 = tmp.view(-1)
    out2 = b.t()
    out3 = out1.unsqueeze(0)
    return out1, out2, out3


@case("some_output_requires_grad_input_doesnt", lambda rg: [torch.randn(3, 3), torch.randn(3, 3, requires_grad=True)], (True,))
def _some_output_requires_grad_input_doesnt(a, b):
    a_view = a.view(-1)
    a_view.requires_grad_(True)
    return a_view


@case("some_outputs_dont_require_grad_view", randn_leaf((3, 3), (3, 3)), (True,))
def _some_outputs_dont_require_grad_view(a, b):
    return a.detach(), b


@case("some_outputs_dont_require_grad_non_view", randn_leaf((3, 3), (3, 3)), (True,))
def _some_outputs_dont_require_grad_non_view(a, b):
    return a.add(1).detach(), b


@case("output_dict", randn_leaf((3, 3)))
def _output_dict(x):
    return {"a": x, "b": x}


@case("output_dict2", lambda rg: [torch.randn(3, requires_grad=rg), torch.randn(3)])
def _output_dict2(x, y):
    return {"a": x, "b": y + x}


@case("output_dict_input_dict", lambda rg: [{"a": torch.randn(3, requires_grad=rg), "b": torch.randn(3, requires_grad=rg)}])
def _output_dict_input_dict(x):
    return {k: x[k] * 2 for k in x}


def _dupe(shape: tuple[int, ...], clone: bool) -> Callable[[bool], list[Any]]:
    def make(rg: bool) -> list[Any]:
        x = torch.randn(*shape, requires_grad=rg)
        if clone:
            x = x.clone()
        return [x, x]

    return make


@case("dupe_arg", _dupe((3, 3), clone=False))
def _dupe_arg(x, y):
    return x + y


@case("dupe_arg_torture", _dupe((3, 3), clone=True))
def _dupe_arg_torture(x, y):
    x.t_()
    y.unsqueeze_(0)
    return x + y


@case("invalid_dupe_left_bias", _dupe((3, 3), clone=True))
def _invalid_dupe_left_bias(x, y):
    x.t_()
    return (x + y,)


def _dupe_returned_inputs(rg: bool) -> list[Any]:
    a = torch.ones(2)
    return [a, torch.ones(2), a]


@case("dupe_arg_returned_as_output", _dupe_returned_inputs, (False,))
def _dupe_arg_returned_as_output(a, b, a_):
    a[0].add_(1)
    return a_


@case("output_op_depending_on_symint", randn_leaf((5,)))
def _output_op_depending_on_symint(x):
    return x.expand(x.shape)


@case("default_partitioner_saves_symints_not_tensors_for_bw", ones_nonleaf((2, 2)))
def _default_partitioner_saves_symints_not_tensors_for_bw(a):
    b = a[0]
    c = torch.ones_like(b, dtype=torch.bool)
    d = b.masked_fill_(c, 0)
    return d


def _no_grad_io_inputs(ra: bool, rb: bool) -> Callable[[bool], list[Any]]:
    return lambda rg: [torch.randn(5, requires_grad=ra), torch.randn(5, requires_grad=rb)]


def _no_grad_input_output(a, b):
    return a.cos(), b.cos(), a * b


for _ra in (False, True):
    for _rb in (False, True):
        CASES[f"no_grad_input_output_{int(_ra)}{int(_rb)}"] = (_no_grad_input_output, _no_grad_io_inputs(_ra, _rb), (False,))


def _false_aliasing_inputs(layout: Callable[[torch.Tensor], list[torch.Tensor]], shape: tuple[int, ...]) -> Callable[[bool], list[Any]]:
    return lambda rg: layout(torch.ones(*shape, requires_grad=rg).add(1))


def _false_aliasing(a, b):
    a.mul_(3)
    b.mul_(2)
    return a.clone().view(-1) + b.clone().view(-1)


_FALSE_ALIASING_LAYOUTS: dict[str, tuple[Callable[[torch.Tensor], list[torch.Tensor]], tuple[int, ...], tuple[bool, ...]]] = {
    # no overlap, contiguous
    "1": (lambda x: [x[0:2], x[2:4]], (4, 4), (False, True)),
    # no overlap, non-contiguous: the first ends before the second starts
    "2": (lambda x: [x.as_strided((4, 4), (8, 1), 0), x.as_strided((4, 4), (8, 1), 28)], (256,), (False,)),
    # no overlap, perfectly interleaved
    "3": (lambda x: [x[:, 0:2], x[:, 2:4]], (4, 4), (False,)),
    "4": (lambda x: [x.as_strided((4, 4), (9, 1), 0), x.as_strided((4, 4), (9, 1), 22)], (256,), (False,)),
    "5": (lambda x: [x.as_strided((4, 4), (9, 1), 0), x.as_strided((4, 4), (9, 1), 23)], (256,), (False,)),
    "6": (lambda x: [x.as_strided((2, 4, 3), (110, 24, 4), 5), x[196 : 196 + 24]], (256,), (False,)),
    # real overlap
    "overlap1": (lambda x: [x.as_strided((4, 4), (9, 1), 0), x.as_strided((4, 4), (9, 1), 24)], (256,), (False,)),
    "overlap2": (lambda x: [x.as_strided((4, 4), (9, 1), 0), x.as_strided((4, 4), (9, 1), 25)], (256,), (False,)),
    "overlap3": (lambda x: [x.as_strided((2, 4, 3), (110, 24, 4), 5), x[195 : 195 + 24]], (256,), (False,)),
}
for _name, (_layout, _shape, _rgs) in _FALSE_ALIASING_LAYOUTS.items():
    CASES[f"input_mutation_false_aliasing_{_name}"] = (_false_aliasing, _false_aliasing_inputs(_layout, _shape), _rgs)


@case("new_inp_requires_grad_now", lambda rg: [torch.ones(4, 5), torch.ones(4, 5, requires_grad=rg)])
def _new_inp_requires_grad_now(x, y):
    return x.add_(y)


@case("aot_export_predispatch_func_simple", randn_leaf((2, 2)))
def _aot_export_predispatch_func_simple(x):
    y = x + 2
    with torch.no_grad():
        y.add_(2)
    return (x * 2 + y,)


@case("aot_export_predispatch_func_composite_implicit", randn_leaf((2, 2)))
def _aot_export_predispatch_func_composite_implicit(x):
    with torch.enable_grad():
        y = x @ x
    y.add_(2)
    return (x.sum() + y.sum(),)


@case("aot_export_predispatch_composite_implicit_inplace", randn_leaf((2, 2)))
def _aot_export_predispatch_composite_implicit_inplace(x):
    return (torch.ops.aten.absolute_.default(x.clone()),)


@case("aot_export_predispatch_func_view", randn_leaf((2, 2)))
def _aot_export_predispatch_func_view(x):
    y = x @ x
    y.add_(2)
    return (x.sum() + y.view(1, 4).sum(),)


# -- regression tests for bugs these cases found ----------------------------


@case("regression_metadata_mutated_input_saved_for_backward", lambda rg: [*nonleaf((2, 2), req_grad=rg), torch.randn(2, 2, requires_grad=True)])
def _regression_metadata_mutated_input_saved_for_backward(a, b):
    # the epilogue's as_strided_ bumped the version of the very tensor the
    # compiled forward saved for backward: the backward raised
    a.t_()
    return a * b


@case("regression_detach_write_then_view_write", ones_nonleaf((3, 3)))
def _regression_detach_write_then_view_write(a):
    # a write through a view of a detach-ed alias keeps the base's identity
    a.detach()[0].mul_(2)
    return a * 3


@case("regression_fill_diagonal_", ones_nonleaf((3, 3)))
def _regression_fill_diagonal_(x):
    # a write through an as_strided view becomes as_strided_scatter, whose
    # torch derivative gives self the gradient inside the window, not outside
    return x.fill_diagonal_(0)


@case("regression_as_strided_write", lambda rg: [torch.arange(8.0, requires_grad=rg).mul(1)])
def _regression_as_strided_write(x):
    return x.as_strided((2, 2), (1, 4), 1).mul_(3), x * 2


@case("regression_as_strided_write_transposed_input", lambda rg: [torch.arange(12.0, requires_grad=rg).mul(1).view(3, 4).t()])
def _regression_as_strided_write_transposed_input(x):
    x.as_strided((2,), (5,), 0).add_(10)
    return x * 1


@case("regression_out_argument_resized", lambda rg: [torch.randn(3, requires_grad=rg), torch.empty(0)], (False,))
def _regression_out_argument_resized(x, out):
    # out= resizes an empty input: no metadata-mutation flag, and the
    # epilogue copied a 3-element value into the 0-element input
    return torch.add(x, 1, out=out)


@case("regression_input_resize_grows", lambda rg: [torch.empty(2)], (False,))
def _regression_input_resize_grows(o):
    # the epilogue's as_strided_ went past the input's storage: grow it first
    o.resize_(4)
    return o.fill_(1)


def _dupe_and_transposed_view(rg: bool) -> list[Any]:
    y = torch.randn(3, 3, requires_grad=rg).clone()
    return [y, y, y.t()]


@case("regression_merged_input_metadata_mutation_returned", _dupe_and_transposed_view)
def _regression_merged_input_metadata_mutation_returned(a, b, c):
    # synthetic_base's epilogue re-strided the caller's tensor under no_grad:
    # the gradient of the returned (transposed) input came back untransposed
    a.mul_(2)
    b.t_()
    return a + c, b


def _view_input(view: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[bool], list[Any]]:
    return lambda rg: [view(torch.randn(3, 3, requires_grad=rg).clone())]


@case("regression_strided_input_data_then_metadata_mutation", _view_input(lambda x: x[:, 0]))
def _regression_strided_input_data_then_metadata_mutation(a):
    # the epilogue took the new geometry from the functional value, which a
    # data mutation had made contiguous: eager's a is (1, 3) with strides (9, 3)
    a.add_(1)
    a.unsqueeze_(0)
    return a.reshape(-1)


@case("regression_strided_input_metadata_then_data_mutation", _view_input(lambda x: x[:, 0]))
def _regression_strided_input_metadata_then_data_mutation(a):
    a.unsqueeze_(0)
    a.mul_(2)
    return a * 1


@case("regression_offset_input_data_then_metadata_mutation", _view_input(lambda x: x[1]))
def _regression_offset_input_data_then_metadata_mutation(a):
    # the same for an input at storage offset 3 (rebuilt at offset 0, or -3)
    a.add_(1)
    a.unsqueeze_(0)
    return a.view(a.shape), a.reshape(-1)


@case("regression_strided_input_data_mutation_output_view", _view_input(lambda x: x.diagonal()))
def _regression_strided_input_data_mutation_output_view(a):
    # an output viewing a data-mutated input took the functional value's strides
    a.add_(1)
    return a.view(a.shape), a


@case("regression_detach_of_view_write", ones_nonleaf((3, 3)))
def _regression_detach_of_view_write(a):
    # the elements the write did not touch kept their gradient path through
    # the scatter into a, and got the identity-gradient zero on top: twice
    a[0].detach().mul_(2)
    return a * 3


@case("regression_detach_write_to_merged_input", lambda rg: _two_views_of(rg, (3, 3), lambda x: [x[0], x]))
def _regression_detach_write_to_merged_input(a, b):
    a.detach().mul_(3)
    return (b * 2,)


@case("merged_input_unbind_output_after_metadata_mutation", lambda rg: _two_views_of(rg, (3, 3), lambda x: [x[0], x.diagonal()]))
def _merged_input_unbind_output_after_metadata_mutation(a, b):
    b.add_(1)
    b.unsqueeze_(0)
    a[0].add_(2)
    return a.unbind(0)[0], b.sum()


# Expected failures: "<case>-grad" / "<case>-nograd" -> reason (strict xfail).
# (requires_grad_(), detach_() and .data = inside the program run eagerly with a
# warning: Note [Autograd state changed by the program] in conveyor.fallback.)
XFAIL: dict[str, str] = {}


def _marked(ids: list[str], xfail: dict[str, str]) -> list[Any]:
    """One param per id, strict xfails where ``xfail`` names a reason."""
    assert set(xfail) <= set(ids), set(xfail) - set(ids)
    return [
        pytest.param(i, id=i, marks=pytest.mark.xfail(strict=True, reason=xfail[i])) if i in xfail else pytest.param(i, id=i)
        for i in ids
    ]


def _params() -> list[Any]:
    return _marked([f"{n}-{'grad' if rg else 'nograd'}" for n in sorted(CASES) for rg in CASES[n][2]], XFAIL)


@pytest.mark.parametrize("case_id", _params())
def test_case(case_id: str) -> None:
    name, _, grad = case_id.rpartition("-")
    fn, make, _ = CASES[name]
    run(fn, make, (grad == "grad",))


# The same programs called under torch.no_grad() and torch.inference_mode()
# (the original's test_grad_context / test_inference_mode, for every case):
# with inputs requiring grad where the case has them.
_MODES = {"no_grad": torch.no_grad, "inference_mode": torch.inference_mode}
_MODE_XFAIL: dict[str, str] = {}


def _mode_params() -> list[Any]:
    return _marked([f"{m}-{n}" for m in _MODES for n in sorted(CASES)], _MODE_XFAIL)


@pytest.mark.parametrize("case_id", _mode_params())
def test_case_grad_mode(case_id: str) -> None:
    mode, _, name = case_id.partition("-")
    fn, make, req_grads = CASES[name]
    with _MODES[mode]():
        torch.manual_seed(0)
        check(fn, *make(max(req_grads)), compile=compile_eager)


# -- cases that need more than ``run`` --------------------------------------


class _Foo(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, gx):
        return gx * 0.5


@pytest.mark.filterwarnings("ignore:conveyor. running .* eagerly")
def test_input_output_aliase_custom_autograd_function() -> None:
    def f(x):
        return _Foo.apply(x)

    check(f, torch.ones(2, 2, requires_grad=True), compile=compile_eager)


class _CustomFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output + 1


@pytest.mark.filterwarnings("ignore:conveyor. running .* eagerly")
def test_custom_autograd() -> None:
    def f(x):
        return _CustomFn.apply(x)

    check(f, torch.randn(3), compile=compile_eager)
    check(f, torch.randn(3, requires_grad=True), compile=compile_eager)


def test_input_mutation_modifies_autograd_meta_of_aliases_view_seen_after() -> None:
    """The original's second half: a view of the input taken *before* the
    call sees the mutation, and gradients through it agree."""

    def f(a):
        a.mul_(2)
        out = a + 1
        return out.detach()

    sides = []
    for fn in (f, compile_eager(f)):
        x = torch.ones(3, 3, requires_grad=True)
        xc = x.clone()
        view = xc.view(3, 3)
        fn(xc)
        (xc * view).sum().backward()
        sides.append((view.detach().clone(), view._version, type(view.grad_fn).__name__, x.grad))
    (ev, ever, efn, eg), (cv, cver, cfn, cg) = sides
    torch.testing.assert_close(cv, ev)
    assert cfn == efn
    torch.testing.assert_close(cg, eg)


def test_batchnorm_training_module() -> None:
    check(nn.BatchNorm2d(4), torch.ones(1, 4, 2, 2), compile=compile_eager)


def test_batchnorm_inference() -> None:
    m = nn.BatchNorm2d(4).eval()
    with torch.no_grad():
        check(m, torch.randn(4, 4, 4, 4), compile=compile_eager)
    check(m, torch.randn(4, 4, 4, 4, requires_grad=True), compile=compile_eager)


def test_inference_mode() -> None:
    m = nn.Linear(4, 4)
    inp = torch.randn(4, 4)
    compiled = compile_eager(m)
    with torch.inference_mode():
        out_ref = m(inp)
        out_test = compiled(inp)
    torch.testing.assert_close(out_test, out_ref)


def test_inference_mode_checker() -> None:
    with torch.inference_mode():
        check(nn.Linear(4, 4), torch.randn(4, 4), compile=compile_eager)


def test_no_grad_mode_mutation_of_input() -> None:
    def f(a, b):
        a.mul_(2)
        return a + b, b.view(-1)

    with torch.no_grad():
        check(f, *nonleaf((3, 3), (3, 3), req_grad=True), compile=compile_eager)


class _BufferModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("buf", torch.zeros(1))
        self.w1 = nn.Parameter(torch.zeros(1))
        self.w2 = nn.Parameter(torch.zeros(1))

    def forward(self, x):
        self.buf.add_(1)
        return (self.w1 * x * self.w2).sum() + self.buf.sum()


class _BufferModelShapes(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("buf", torch.ones(4, 4))
        self.w = nn.Parameter(torch.tensor([[4.0, 5], [1, 2], [6, 7], [8, 9]]))

    def forward(self, x):
        self.buf.add_(1)
        return (self.w @ x).sum() + self.buf.sum()


class _BufferBatchNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.m = nn.BatchNorm1d(100)

    def forward(self, x):
        return self.m(x)


class _BufferMutationMetadata(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("foo", torch.zeros(2, 2))

    def forward(self, x):
        self.foo.add_(4)
        return (x.sum() + self.foo.sum(),)


def test_buffer_batch_norm() -> None:
    check(_BufferBatchNorm(), torch.ones(20, 100, requires_grad=True).clone(), compile=compile_eager)


def test_aot_export_predispatch_buffer_mutation_metadata() -> None:
    check(_BufferMutationMetadata(), torch.randn(2, 2), compile=compile_eager)
    check(_BufferMutationMetadata(), torch.randn(2, 2, requires_grad=True), compile=compile_eager)


def test_aot_export_predispatch_func_composite_implicit_under_no_grad() -> None:
    with torch.no_grad():
        check(_aot_export_predispatch_func_composite_implicit, torch.randn(2, 2, requires_grad=True), compile=compile_eager)


def test_buffer_copied_in_graph() -> None:
    check(_BufferModel(), torch.ones(1, requires_grad=True).clone(), compile=compile_eager)


def test_buffer_copied_in_graph_with_different_shapes() -> None:
    check(_BufferModelShapes(), torch.ones(2, 4, requires_grad=True).clone(), compile=compile_eager)
