"""Control-flow higher-order ops, from PyTorch's ``test/functorch/test_control_flow.py``
(``TestControlFlow``, ``TestControlFlowTraced``: ``torch.cond``, ``torch.while_loop``,
``control_flow.map``) and ``test/dynamo/test_higher_order_ops.py``
(``HigherOrderOpTests``: closures over tensors and modules, nested calls).
Registered in :data:`dynamo_repro_programs.PROGRAMS`; names prefixed ``hop_``."""

from __future__ import annotations

import torch
from dynamo_repro_programs import args, fn, program, randn
from torch import nn
from torch._higher_order_ops.map import map as hop_map

# -- torch.cond -------------------------------------------------------------------------


@fn("hop_cond_simple", randn((4,)))
def _cond_simple(x):
    return torch.cond(x.sum() > 0, lambda x: x.sin(), lambda x: x.cos(), (x,))


@fn("hop_cond_two_operands", randn((4, 3), (4, 3)))
def _cond_two(x, y):
    return torch.cond(x.sum() > y.sum(), lambda a, b: a * b, lambda a, b: a + b.exp(), (x, y))


@fn("hop_cond_pred_python_bool", randn((4,)))
def _cond_bool(x):
    return torch.cond(x.shape[0] > 2, lambda x: x + 1, lambda x: x - 1, (x,))


@fn("hop_cond_closure_over_tensor", randn((4,), (4,)))
def _cond_closure(x, y):
    def t(x):
        return x * y

    def f(x):
        return x - y.sin()

    return torch.cond(y.mean() > 0, t, f, (x,))


@fn("hop_cond_nested", randn((4,)))
def _cond_nested(x):
    def inner_t(x):
        return x * 2

    def inner_f(x):
        return x / 2

    def outer_t(x):
        return torch.cond(x.max() > 1, inner_t, inner_f, (x,)) + 1

    def outer_f(x):
        return x.cos()

    return torch.cond(x.sum() > -10, outer_t, outer_f, (x,))


@fn("hop_cond_multiple_outputs", randn((3, 4)))
def _cond_multi_out(x):
    return torch.cond(x.sum() > 0, lambda x: (x + 1, x.sum(0)), lambda x: (x - 1, x.mean(0)), (x,))


@fn("hop_cond_output_is_view_computation", randn((4, 6)))
def _cond_view(x):
    return torch.cond(x.sum() > 0, lambda x: x.t() * 2, lambda x: x.t() - 1, (x,))


@fn("hop_cond_pytree_operands", args(lambda: {"a": torch.randn(3), "b": [torch.randn(3), torch.randn(3)]}))
def _cond_pytree(d):
    def t(d):
        return d["a"] + d["b"][0]

    def f(d):
        return d["a"] - d["b"][1]

    return torch.cond(d["a"].sum() > 0, t, f, (d,))


@fn("hop_cond_after_and_before_inplace", randn((4,)))
def _cond_inplace_around(x):
    y = x.clone()
    y.add_(1)
    out = torch.cond(y.sum() > 0, lambda a: a * 3, lambda a: a * 4, (y,))
    y.mul_(2)
    return out, y


@fn("hop_cond_on_mutated_input", randn((4,)))
def _cond_input_mutated(x):
    x.mul_(2)
    return torch.cond(x.sum() > 0, lambda a: a.relu(), lambda a: a.abs(), (x,))


@fn("hop_cond_int_operand_shape", randn((4, 5)))
def _cond_shape(x):
    return torch.cond(x.size(0) == 4, lambda a: a.sum(1), lambda a: a.sum(0)[:4], (x,))


class _CondModule(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.buf = nn.Buffer(torch.ones(4))

    def forward(self, x):
        def t(x):
            return self.lin(x) + self.buf

        def f(x):
            return self.lin(x).relu() - self.buf

        return torch.cond(x.sum() > 0, t, f, (x,))


program("hop_cond_closes_over_module", randn((2, 4)))(_CondModule)


class _CondTwoModules(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(3, 3)
        self.b = nn.Linear(3, 3)

    def forward(self, x):
        return torch.cond(x.mean() > 0, self.a, self.b, (x,))


program("hop_cond_branches_are_modules", randn((2, 3)))(_CondTwoModules)


@fn("hop_cond_with_grad_outside", randn((4,)))
def _cond_grad_outside(x):
    y = x * 2
    z = torch.cond(y.sum() > 0, lambda a: a.sin(), lambda a: a.cos(), (y,))
    return z * x


@fn("hop_cond_in_loop", randn((4,)))
def _cond_loop(x):
    for i in range(3):
        x = torch.cond(x.sum() > i, lambda a: a - 1, lambda a: a + 2, (x,))
    return x


@fn("hop_cond_no_grad_region", randn((4,)))
def _cond_no_grad(x):
    with torch.no_grad():
        y = torch.cond(x.sum() > 0, lambda a: a * 2, lambda a: a * 3, (x,))
    return y + x


# -- torch.while_loop --------------------------------------------------------------------


@fn("hop_while_loop_simple", randn((3,)))
def _while_simple(x):
    def cond_fn(i, x):
        return i < 5

    def body_fn(i, x):
        return i + 1, x * 1.1

    return torch.while_loop(cond_fn, body_fn, (torch.tensor(0), x))


@fn("hop_while_loop_data_dependent_stop", randn((4,)))
def _while_data(x):
    def cond_fn(x):
        return x.sum() < 20

    def body_fn(x):
        return (x.abs() + 1,)

    return torch.while_loop(cond_fn, body_fn, (x,))


@fn("hop_while_loop_closure", randn((3,), (3,)))
def _while_closure(x, y):
    def cond_fn(i, x):
        return i < 3

    def body_fn(i, x):
        return i + 1, x + y

    return torch.while_loop(cond_fn, body_fn, (torch.tensor(0), x))


@fn("hop_while_loop_two_carries", randn((2, 2), (2, 2)))
def _while_two(a, b):
    def cond_fn(i, a, b):
        return i < 4

    def body_fn(i, a, b):
        return i + 1, b * 1, a @ b * 0.5

    return torch.while_loop(cond_fn, body_fn, (torch.tensor(0), a, b))


class _WhileModule(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        def cond_fn(i, x):
            return i < 3

        def body_fn(i, x):
            return i + 1, self.lin(x).tanh()

        return torch.while_loop(cond_fn, body_fn, (torch.tensor(0), x))


program("hop_while_loop_module", randn((2, 3)))(_WhileModule)


@fn("hop_while_loop_then_inplace", randn((3,)))
def _while_then_inplace(x):
    _, y = torch.while_loop(lambda i, y: i < 2, lambda i, y: (i + 1, y * 2), (torch.tensor(0), x.clone()))
    y.add_(1)
    return y, x


# -- map -----------------------------------------------------------------------------------


@fn("hop_map_simple", randn((3, 4)))
def _map_simple(xs):
    return hop_map(lambda x: x.sin() * 2, xs)


@fn("hop_map_with_args", randn((3, 4), (4,)))
def _map_args(xs, y):
    return hop_map(lambda x, y: x * y + 1, xs, y)


@fn("hop_map_multiple_outputs", randn((2, 5)))
def _map_multi(xs):
    return hop_map(lambda x: (x + 1, x.sum()), xs)


@fn("hop_map_nested", randn((2, 3, 4)))
def _map_nested(xs):
    return hop_map(lambda x: hop_map(lambda z: z.cos(), x), xs)


@fn("hop_map_cond_inside", randn((3, 4)))
def _map_cond(xs):
    return hop_map(lambda x: torch.cond(x.sum() > 0, lambda a: a * 2, lambda a: a / 2, (x,)), xs)


# -- dynamo's higher-order-op tests: closures, checkpoint, nested functions ---------------


@fn("hop_checkpoint_closure", randn((4, 4), (4, 4)))
def _checkpoint(x, y):
    def g(a):
        return torch.sin(a) @ y

    return torch.utils.checkpoint.checkpoint(g, x, use_reentrant=False).relu()


@fn("hop_checkpoint_dropout", randn((8, 8)))
def _checkpoint_dropout(x):
    return torch.utils.checkpoint.checkpoint(lambda a: torch.nn.functional.dropout(a.sin(), 0.3), x, use_reentrant=False)


class _CheckpointModule(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.l1 = nn.Linear(4, 4)
        self.l2 = nn.Linear(4, 4)

    def forward(self, x):
        x = torch.utils.checkpoint.checkpoint(lambda a: self.l1(a).relu(), x, use_reentrant=False)
        return self.l2(x)


program("hop_checkpoint_module", randn((3, 4)))(_CheckpointModule)


@fn("hop_cond_then_checkpoint", randn((4,)))
def _cond_checkpoint(x):
    y = torch.cond(x.sum() > 0, lambda a: a + 1, lambda a: a - 1, (x,))
    return torch.utils.checkpoint.checkpoint(torch.sin, y, use_reentrant=False)
