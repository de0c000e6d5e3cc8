"""Tensor-subclass programs, from PyTorch's ``test/dynamo/test_subclasses.py``
(``SubclassTests``: views of a subclass as inputs, subclasses created and returned
inside the program, ``__torch_function__`` subclasses, parameters that are
subclasses) on ``TwoTensor`` (``torch.testing._internal.two_tensor``).
Registered in :data:`dynamo_repro_programs.PROGRAMS` (``subclass=True``: checked
by ``check_subclass``); names prefixed ``subclass_``."""

from __future__ import annotations

import torch
from dynamo_repro_programs import args, fn, program
from torch import nn
from torch.testing._internal.two_tensor import TwoTensor


def two(*shape: int) -> TwoTensor:
    return TwoTensor(torch.randn(*shape), torch.randn(*shape))


def _double(x):
    return x * 2


# test_subclass_views: a view of a subclass as the input
_VIEWS = {
    "narrow": lambda t: t.narrow(-1, 3, 8),
    "split": lambda t: t.split(5, -1)[2],
    "split_with_sizes": lambda t: t.split_with_sizes([9, 6], -1)[1],
    "expand": lambda t: t.unsqueeze(-1).expand(4, 15, 10),
    "select": lambda t: t.select(-1, 6),
    "slice": lambda t: t[2:3, 5:9],
    "view": lambda t: t.view(-1, 15),
}
for _name, _view in _VIEWS.items():
    fn(f"subclass_views_{_name}", args(lambda v=_view: v(two(4, 15))), subclass=True)(_double)


@fn("subclass_pointwise_and_reduction", args(lambda: two(3, 4)), subclass=True)
def _pointwise(x):
    return (x.sin() + 1).sum(0), x.mean()


@fn("subclass_with_plain_tensor", args(lambda: two(3, 4), lambda: torch.randn(3, 4)), subclass=True)
def _mixed(x, y):
    return x * y + y.cos()


@fn("subclass_matmul", args(lambda: two(3, 4), lambda: two(4, 5)), subclass=True)
def _matmul(x, y):
    return (x @ y).relu()


@fn("subclass_inplace_on_input", args(lambda: two(3, 4)), subclass=True)
def _inplace_input(x):
    x.add_(1)
    return x * 2


@fn("subclass_inplace_on_view_of_input", args(lambda: two(3, 4)), subclass=True)
def _inplace_view_input(x):
    x[0].mul_(3)
    return x.sum()


@fn("subclass_output_views", args(lambda: two(3, 4)), subclass=True)
def _output_views(x):
    y = x * 2
    return y.view(-1), y.t(), y[1:]


@fn("subclass_output_is_input_view", args(lambda: two(3, 4)), subclass=True)
def _output_input_view(x):
    return x.t(), x[0]


@fn("subclass_created_inside", args(lambda: torch.randn(3), lambda: torch.randn(3)), subclass=True)
def _created_inside(a, b):
    t = TwoTensor(a * 2, b + 1)
    return t.sin()


@fn("subclass_inner_attributes", args(lambda: two(3, 3)), subclass=True)
def _inner(x):
    y = x * 3
    return y.a + y.b


@fn("subclass_clone_mutate_return", args(lambda: two(4,)), subclass=True)
def _clone_mutate(x):
    y = x.clone()
    y.mul_(2).add_(x)
    return y


@fn("subclass_cat_and_stack", args(lambda: two(2, 3), lambda: two(2, 3)), subclass=True)
def _cat(x, y):
    return torch.cat([x, y]), torch.stack([x, y], 1)


@fn("subclass_detach_and_requires_grad", args(lambda: two(3,)), subclass=True)
def _detach(x):
    return x.detach() * 2, x * x


@fn("subclass_two_inputs_same_tensor", args(lambda: two(3, 2)), subclass=True)
def _same_twice(x):
    return _cross(x, x)


def _cross(a, b):
    return a * b.exp()


class _Scale(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(two(4, 3))

    def forward(self, x):
        return torch.tanh(x @ self.w) * 2


program("subclass_parameter", args(lambda: torch.randn(2, 4)), subclass=True)(_Scale)
program("subclass_parameter_called_twice", args(lambda: torch.randn(2, 4)), calls=2, subclass=True)(_Scale)


class _SubclassBuffer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)
        self.state = nn.Buffer(two(3))

    def forward(self, x):
        out = self.lin(x) + self.state
        with torch.no_grad():
            self.state.add_(1)
        return out


program("subclass_buffer_mutation", args(lambda: torch.randn(2, 3)), calls=2, subclass=True)(_SubclassBuffer)


class Tagged(torch.Tensor):
    """A ``__torch_function__`` subclass (as test_subclasses' LocalSubclass)."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        return super().__torch_function__(func, types, args, kwargs or {})


@fn("subclass_torch_function_as_subclass", args(lambda: torch.randn(3, 3)), subclass=True)
def _as_subclass(x):
    return x.as_subclass(Tagged).sin() * 2


@fn("subclass_torch_function_input", args(lambda: torch.randn(3, 3).as_subclass(Tagged)), subclass=True)
def _tf_input(x):
    return x.exp() + 1, x.t()
