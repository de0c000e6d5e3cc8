"""Catalogue programs that write their inputs: data, through views, metadata; and
outputs that are inputs (see ``functionalize_catalogue.py``)."""

from __future__ import annotations

import torch
from catalogue_case import S, case

# -- data mutation of one and of several inputs --------------------------------


@case(S, mutated=(0,))
def add_one(x):
    x.add_(1)
    return (x * 2,)


@case(S, S, mutated=(0, 1))
def two_inputs(x, y):
    x.mul_(2)
    y.add_(x)
    return (x + y,)


@case(S, S, S, mutated=(0, 1, 2))
def three_inputs(x, y, z):
    x.add_(1)
    y.mul_(2)
    z.sub_(3)
    return (x + y + z,)


@case(S, S, mutated=(0,))
def copy_in(x, y):
    x.copy_(y * 3)
    return (y * 2,)


@case(S, S, mutated=(0,))
def zero(x, y):
    x.zero_()
    return (y + 1,)


@case(S, S, mutated=(0,))
def fill(x, y):
    x.fill_(3.0)
    return (y * x,)


@case(S, S, mutated=(0,))
def out_arg(x, y):
    torch.add(y, 1, out=x)
    return (y * 2,)


@case(S, mutated=(0,))
def clamp(x):
    x.clamp_(min=0)
    return (x.sum(0),)


@case(S, S, mutated=(0,))
def addcmul(x, y):
    x.addcmul_(y, y, value=0.5)
    return (y - 1,)


@case(S, S, mutated=(0,))
def setitem(x, y):
    x[1] = y[0]
    return (y.exp(),)


@case(S, mutated=(0,))
def masked_fill(x):
    x.masked_fill_(x > 0, 0.0)
    return (x * 1,)


@case(S, S, mutated=(0,))
def mutate_then_read(x, y):
    x.add_(1)
    return (x.sum(0) + y,)


@case(S, mutated=(0,))
def mutate_twice(x):
    x.add_(1)
    x.mul_(3)
    return (x.cos(),)


@case(S, S, mutated=(0,))
def mutate_with_grad_value(x, y):
    x.add_(y)
    return (x * y,)


@case(S, S, mutated=(0,))
def mutate_under_no_grad(x, y):
    with torch.no_grad():
        x.add_(1)
    return (y * 2,)


@case(S, S, mutated=(0,))
def mutate_under_no_grad_then_read(x, y):
    with torch.no_grad():
        x.mul_(2)
    return (x + y,)


@case(S, S, mutated=(0,))
def mutate_view_under_no_grad_then_read(x, y):
    with torch.no_grad():
        x[1:].mul_(2)
    return (x * y,)


@case(S)
def intermediate_written_under_no_grad(x):
    y = x * 2
    with torch.no_grad():
        y.add_(1)
    return (y * 3,)


@case(S)
def intermediate_row_written_under_no_grad(x):
    y = x * 2
    with torch.no_grad():
        y[0].add_(1)
    return (y * 3,)


# -- mutation through a view of an input ---------------------------------------


@case(S, mutated=(0,))
def select_mul(x):
    x[0].mul_(2)
    return (x + 1,)


@case(S, mutated=(0,))
def flat_view_add(x):
    x.view(-1).add_(1)
    return (x * 2,)


@case((4, 4), mutated=(0,))
def diagonal_zero(x):
    x.diagonal().zero_()
    return (x * 2,)


@case(S, mutated=(0,))
def column_fill(x):
    x[:, 1].fill_(0)
    return (x.sum(),)


@case(S, mutated=(0,))
def transposed_add(x):
    x.t().add_(1)
    return (x * 1,)


@case(S, (2, 4), mutated=(0,))
def narrow_copy(x, y):
    x.narrow(0, 1, 2).copy_(y)
    return (y * 3,)


@case(S, mutated=(0,))
def view_mutation_then_read(x):
    x[0].add_(1)
    return (x.sum(1),)


@case(S, mutated=(0,))
def view_mutation_no_output(x):
    x[1:].mul_(0.5)
    return (torch.ones(2),)


# -- metadata mutation ----------------------------------------------------------


@case(S, S, mutated=(0,))
def t_(x, y):
    x.t_()
    return (y * 2,)


@case(S, mutated=(0,))
def transpose_(x):
    x.transpose_(0, 1)
    return (x + 1,)


@case(S, mutated=(0,))
def unsqueeze_(x):
    x.unsqueeze_(0)
    return (x * 2,)


@case((3, 1, 4), mutated=(0,))
def squeeze_(x):
    x.squeeze_(1)
    return (x * 2,)


@case(S, mutated=(0,))
def as_strided_(x):
    x.as_strided_((2, 2), (1, 2), 1)
    return (x * 2,)


@case(S, mutated=(0,))
def t_return_input(x):
    x.t_()
    return (x,)


@case(S, mutated=(0,))
def t_then_data(x):
    x.t_()
    x.mul_(2)
    return (x.sum(0),)


@case(S, mutated=(0,))
def unsqueeze_then_view(x):
    x.unsqueeze_(0)
    return (x[0],)


@case(S)
def squeeze_noop(x):
    x.squeeze_(0)
    return (x * 2,)


@case(S)
def transpose_twice(x):
    x.transpose_(0, 1)
    x.transpose_(0, 1)
    return (x * 2,)


# -- outputs that are inputs ---------------------------------------------------


@case(S)
def identity(x):
    return (x,)


@case(S, S)
def both_inputs(x, y):
    return (y, x)


@case(S)
def input_and_fresh(x):
    return (x, x * 2)


@case(S, mutated=(0,))
def mutated_input_returned(x):
    x.add_(1)
    return (x,)


@case(S)
def input_twice(x):
    return (x, x)
