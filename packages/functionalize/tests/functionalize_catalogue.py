"""The catalogue of programs the functionalize stage must get right.

Each :class:`Case` is a function, how to build its inputs, and which inputs it
mutates. With ``requires_grad``, float inputs require grad; the inputs a case
mutates are then non-leaf tensors (``leaf * 1``), since writing into a leaf
that requires grad is an error in eager (see test_functionalize_errors.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch


@dataclass(frozen=True)
class Case:
    name: str
    fn: Callable[..., Any]
    shapes: tuple[tuple[int, ...], ...]
    mutated: tuple[int, ...] = ()
    grad_variant: bool = True  # also run with requires_grad (not for set_: eager has no backward)

    def leaves(self, requires_grad: bool) -> list[torch.Tensor]:
        gen = torch.Generator().manual_seed(len(self.name))
        return [torch.randn(s, generator=gen).requires_grad_(requires_grad) for s in self.shapes]

    def inputs(self, leaves: list[torch.Tensor]) -> list[torch.Tensor]:
        return [t * 1 if i in self.mutated and t.requires_grad else t for i, t in enumerate(leaves)]


CASES: list[Case] = []


def case(
    *shapes: tuple[int, ...], mutated: tuple[int, ...] = (), grad_variant: bool = True
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        CASES.append(Case(fn.__name__, fn, shapes, mutated, grad_variant))
        return fn

    return register


S = (3, 4)

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
