"""Catalogue programs whose outputs view inputs or intermediates; mutations of
intermediates, storage swaps, dead code and ``copy_`` variants (see
``functionalize_catalogue.py``)."""

from __future__ import annotations

import torch
from catalogue_case import S, case

# -- outputs that view inputs ---------------------------------------------------


@case(S)
def view(x):
    return (x.view(-1),)


@case(S)
def reshape(x):
    return (x.reshape(2, 6),)


@case(S)
def transpose(x):
    return (x.transpose(0, 1),)


@case(S)
def slice_(x):
    return (x[1:],)


@case(S)
def select(x):
    return (x.select(0, 1),)


@case(S)
def unbind(x):
    return x.unbind(0)


@case(S)
def split(x):
    return x.split(1)


@case((4, 4))
def diagonal(x):
    return (x.diagonal(),)


@case((1, 4))
def expand(x):
    return (x.expand(3, 4),)


@case(S)
def as_strided(x):
    return (x.as_strided((2, 2), (2, 1), 1),)


@case(S)
def unsqueeze(x):
    return (x.unsqueeze(1),)


@case(S)
def view_as_int(x):
    return (x.view(torch.int32),)


@case((3, 2), grad_variant=False)  # the checker's gradient loss cannot weight a complex output
def view_as_complex(x):
    return (torch.view_as_complex(x),)


@case(S)
def detach(x):
    return (x.detach(),)


@case(S)
def two_views(x):
    return (x.view(-1), x.t())


@case(S, mutated=(0,))
def view_of_mutated(x):
    x.add_(1)
    return (x.view(-1),)


@case(S, mutated=(0,))
def view_of_metadata_mutated(x):
    x.t_()
    return (x[0],)


@case(S)
def view_and_fresh(x):
    return (x[0], x.sum())


@case(S, S)
def views_of_two_inputs(x, y):
    return (x[0], y[:, 1], x * y)


@case(S)
def view_under_no_grad(x):
    with torch.no_grad():
        v = x.view(-1)
    return (v,)


@case(S)
def view_of_view_under_no_grad(x):
    with torch.no_grad():
        v = x.t()[1:].unsqueeze(0)
    return (v, x * 2)


@case(S)
def unbind_under_no_grad(x):
    with torch.no_grad():
        rows = x.unbind(0)
    return (rows[0], rows[2])


@case(S)
def detach_of_view_under_no_grad(x):
    with torch.no_grad():
        v = x.view(-1).detach()
    return (v,)


@case(S)
def view_of_intermediate_under_no_grad(x):
    y = x * 2
    with torch.no_grad():
        v = y.view(-1)
    return (v, y)


@case(S)
def lone_view_of_intermediate_under_no_grad(x):
    y = x * 2
    with torch.no_grad():
        v = y[0]
    return (v,)


@case(S)
def detached_intermediate_beside_it(x):
    y = x * 2
    return (y.detach(), y)


@case(S, S, mutated=(0,))
def set_under_no_grad_then_read_both(x, y):
    with torch.no_grad():
        x.set_(y)
    return (x * 2 + y * 3,)


# -- outputs that view intermediates --------------------------------------------


@case(S)
def intermediate_view(x):
    return ((x * 2)[0],)


@case(S)
def intermediate_two_views(x):
    y = x * 2
    return (y[0], y[1])


@case(S)
def intermediate_view_and_t(x):
    y = x + 1
    return (y.view(-1), y.t())


@case(S)
def intermediate_and_view(x):
    y = x * 2
    return (y, y.view(-1))


@case(S)
def view_before_intermediate(x):
    y = x * 2
    return (y.view(-1), y)


@case(S)
def intermediate_twice(x):
    y = x * 2
    return (y, y)


@case(S)
def intermediate_unbind(x):
    return (x * 2).unbind(0)


@case(S)
def intermediate_split(x):
    return (x + 1).split(2, dim=1)


@case(S, S)
def two_intermediates(x, y):
    a, b = x * 2, y + 1
    return (a[0], b[0], a[1], b[1])


@case(S)
def intermediate_and_input_views(x):
    y = x.exp()
    return (y[0], x[0], y[1])


# -- mutations of intermediates (no input is touched) -----------------------------


@case(S)
def intermediate_mutated(x):
    y = x.clone()
    y.add_(1)
    return (y,)


@case(S)
def intermediate_view_mutated(x):
    y = x * 1
    y[0].zero_()
    return (y, y[1])


@case(S, mutated=(0,))
def everything(x):
    x[0].add_(1)
    y = x * 2
    return (x, x.view(-1), y[0], y[1], y.sum())


# -- storage swaps (set_) ----------------------------------------------------------


@case(S, (2, 2), mutated=(0,), grad_variant=False)
def set_onto_input(x, y):
    x.set_(y)
    return (x + 1,)


@case(S, (2, 2), mutated=(0,), grad_variant=False)
def set_return_input(x, y):
    x.set_(y)
    return (x,)


@case(S, (2, 2), mutated=(0, 1), grad_variant=False)
def set_then_write_other(x, y):
    x.set_(y)
    y.mul_(2)
    return (x * 1,)


@case(S, (2, 2), mutated=(0,), grad_variant=False)
def set_onto_intermediate(x, y):
    x.set_(y * 2)
    return (y + 1,)


# -- dead code the functional trace drops, and what it must keep ----------------------


@case(S)
def unused_random_kept(x):
    torch.rand(3)  # consumes the generator: dropping it would change the next draw
    return (x + torch.rand(3, 4),)


# -- copy_ spelled with differentiable ops: broadcast, dtype, layout ------------------


@case(S, S, mutated=(0,))
def copy_broadcast_row(x, y):
    x.copy_(y[0])
    return (x + y,)


@case(S, S, mutated=(0,))
def copy_other_dtype(x, y):
    x.copy_(y.double() * 2)
    return (x * 1,)


@case(S, S)
def copy_into_transposed_intermediate(x, y):
    z = x.t().clone()  # keeps the transposed strides
    z.copy_(y.t() * 2)
    return (z,)
