"""AOTAutograd cases: input mutations, input / output views (see ``test_aotdispatch_cases.py``)."""

from __future__ import annotations

from typing import Any

import torch
from aotdispatch_harness import CASES, case, nonleaf, ones_leaf, ones_nonleaf, randn_leaf, two_views_of  # noqa: F401


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


CASES["input_mutation_requires_grad_detach_nonleaf"] = (
    _input_mutation_requires_grad_detach,
    ones_nonleaf((4,)),
    (True,),
)


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
