"""AOTAutograd cases: outputs aliasing inputs and intermediates, containers (see ``test_aotdispatch_cases.py``)."""

from __future__ import annotations

from typing import Any

import torch
from aotdispatch_harness import CASES, case, nonleaf, ones_leaf, ones_nonleaf, randn_leaf, two_views_of  # noqa: F401


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


@case(
    "input_inplace_requires_grad_true",
    lambda rg: nonleaf((3, 3), req_grad=False) + nonleaf((3, 3), req_grad=True),
    (True,),
)
def _input_inplace_requires_grad_true(a, b):
    a.requires_grad_(True)
    return a.mul(3), b.mul(4)


@case(
    "input_data_and_metadata_mutation_aliases_other_input", lambda rg: two_views_of(rg, (2, 2), lambda x: [x[0], x[0]])
)
def _input_data_and_metadata_mutation_aliases_other_input(a, b):
    a.mul_(2)
    b.t_()
    return a.mul(b)


@case("input_mutation_noncontiguous", lambda rg: two_views_of(rg, (2, 2), lambda x: [x[:, 0]]))
def _input_mutation_noncontiguous(a):
    a.mul_(2)
    return a + 1


@case(
    "output_aliases_multiple_inputs_get_correct_one", lambda rg: two_views_of(rg, (2, 2), lambda x: [x.view(-1), x[0]])
)
def _output_aliases_multiple_inputs_get_correct_one(a, b):
    return a.view(a.shape), b.view(b.shape)


@case("input_mutation_aliases_other_input", lambda rg: two_views_of(rg, (4, 2), lambda x: [x[0], x[0]]))
def _input_mutation_aliases_other_input(a, b):
    a.add_(1)
    return a + b


@case("input_mutation_aliases_other_input2", lambda rg: two_views_of(rg, (2, 2), lambda x: [x[0], x]))
def _input_mutation_aliases_other_input2(a, b):
    a.add_(1)
    return a + b


@case(
    "input_mutation_aliases_and_output_alias", lambda rg: two_views_of(rg, (2, 2), lambda x: [x.view(-1), x.view(-1)])
)
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


@case("input_metadata_mutation_aliases", lambda rg: two_views_of(rg, (2, 2), lambda x: [x.view(-1), x.view(-1)]))
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


@case(
    "some_output_requires_grad_input_doesnt",
    lambda rg: [torch.randn(3, 3), torch.randn(3, 3, requires_grad=True)],
    (True,),
)
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


@case(
    "output_dict_input_dict",
    lambda rg: [{"a": torch.randn(3, requires_grad=rg), "b": torch.randn(3, requires_grad=rg)}],
)
def _output_dict_input_dict(x):
    return {k: x[k] * 2 for k in x}
