"""AOTAutograd cases: duplicated and falsely aliased inputs, grad modes, pre-dispatch export, and regressions (see ``test_aotdispatch_cases.py``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from aotdispatch_harness import CASES, case, nonleaf, ones_leaf, ones_nonleaf, randn_leaf, two_views_of  # noqa: F401


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
        CASES[f"no_grad_input_output_{int(_ra)}{int(_rb)}"] = (
            _no_grad_input_output,
            _no_grad_io_inputs(_ra, _rb),
            (False,),
        )


def _false_aliasing_inputs(
    layout: Callable[[torch.Tensor], list[torch.Tensor]], shape: tuple[int, ...]
) -> Callable[[bool], list[Any]]:
    return lambda rg: layout(torch.ones(*shape, requires_grad=rg).add(1))


def _false_aliasing(a, b):
    a.mul_(3)
    b.mul_(2)
    return a.clone().view(-1) + b.clone().view(-1)


_FALSE_ALIASING_LAYOUTS: dict[
    str, tuple[Callable[[torch.Tensor], list[torch.Tensor]], tuple[int, ...], tuple[bool, ...]]
] = {
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


@case(
    "regression_metadata_mutated_input_saved_for_backward",
    lambda rg: [*nonleaf((2, 2), req_grad=rg), torch.randn(2, 2, requires_grad=True)],
)
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


@case(
    "regression_as_strided_write_transposed_input",
    lambda rg: [torch.arange(12.0, requires_grad=rg).mul(1).view(3, 4).t()],
)
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


@case("regression_detach_write_to_merged_input", lambda rg: two_views_of(rg, (3, 3), lambda x: [x[0], x]))
def _regression_detach_write_to_merged_input(a, b):
    a.detach().mul_(3)
    return (b * 2,)


@case(
    "merged_input_unbind_output_after_metadata_mutation",
    lambda rg: two_views_of(rg, (3, 3), lambda x: [x[0], x.diagonal()]),
)
def _merged_input_unbind_output_after_metadata_mutation(a, b):
    b.add_(1)
    b.unsqueeze_(0)
    a[0].add_(2)
    return a.unbind(0)[0], b.sum()
