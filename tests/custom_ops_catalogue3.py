"""Programs from PyTorch's ``test/dynamo/test_aot_autograd.py`` (stored version
003f717), rewritten compactly with small inputs: mutations of inputs under no_grad,
slice assignment into an input, duplicated and overlapping inputs that are mutated,
an autograd.Function returning its input, expand-then-mutate, parameters built
inside the program, data-dependent sizes, and a custom op that returns the same
tensor twice. Registered in :data:`custom_ops_catalogue.PROGRAMS` (names prefixed
``da_``); the programs that need several calls or global state live as their own
tests in ``test_custom_ops_programs.py``."""

from __future__ import annotations

import torch
from custom_ops_catalogue import DATA_DEP, NS, program, randn


def _no_grad_add_(param, y):
    prev = torch.is_grad_enabled()
    try:
        torch.set_grad_enabled(False)
        param.add_(y)
    finally:
        torch.set_grad_enabled(prev)
    return y


program("da_mutation", lambda: [torch.nn.Parameter(torch.randn(4)), torch.randn(4)], grad=False)(_no_grad_add_)


def _stack_into(stack0, scores):
    stack0[:, :-1, :, 4:] = scores[:, :, :4, :5]
    return (stack0.view(1, 2, 16, 9),)


program("da_mutation1", randn((2, 4, 4, 9), (2, 3, 8, 9)))(_stack_into)
program("da_negative_testing_mutation", randn((2, 4, 4, 9), (2, 3, 8, 9)))(lambda s, d: _stack_into(torch.sin(s), d))
program("da_negative_testing", randn((4,), (4,)))(lambda x, y: torch.sin(x).add_(y))


class _LSTM(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = torch.nn.LSTM(8, 8, num_layers=2, bidirectional=True)

    def forward(self, x):
        return (self.lstm(x),)


def _strided_seq() -> list[torch.Tensor]:
    return [torch.randn(2, 8, 6).permute(2, 0, 1)]  # (6, 2, 8), strides (1, 48, 6)


torch.manual_seed(0)
program("da_LSTM", _strided_seq)(_LSTM())


class _ConvFwd(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, kernel_size=(3, 3))

    def forward(self, x):
        return self.conv._conv_forward(x, self.conv.weight, self.conv.bias)


program("da_call_fn_with_non_const_inputs_aot_safe", randn((3, 6, 6)))(_ConvFwd())


class _UnsafeControlFlow(torch.nn.Module):
    def _bad(self, param, y):
        if y[0][0] < 3:
            return y + param
        return param * y

    def forward(self, x, y):
        a = x * y
        a = self._bad(a, a)
        return a * (x + y)


program(
    "da_call_fn_with_non_const_inputs_aot_unsafe_control_flow",
    lambda: [torch.nn.Parameter(torch.randn(2, 2)), torch.randn(2, 2)],
)(_UnsafeControlFlow())


def _trunc_pair(x, y):
    x = x.trunc_()
    y = y.trunc_()
    return (x + y,)


program("da_arg_dupe", randn((3, 3), (3, 3)))(_trunc_pair)


def _same_twice() -> list[torch.Tensor]:
    t = torch.randn(3, 3) * 4
    return [t, t]


program("da_arg_dupe_same_tensor", _same_twice)(_trunc_pair)


class _DupeParam(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mean = torch.nn.Parameter(torch.randn(3, 3))

    def forward(self, a, b, e, f):
        a.trunc_()
        b.trunc_()
        return (a + b + self.mean) * e * f


def _dupe_with_ints() -> list[object]:
    t = torch.randn(3, 3) * 4
    return [t, t, 2, 2]


program("da_arg_dupe_many_args_param_non_tensor_arg", _dupe_with_ints)(_DupeParam())


class _DupeList(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mean = torch.nn.Parameter(torch.randn(3, 3))

    def forward(self, e, f, a, b):
        a.trunc_()
        b.trunc_()
        return (a + b + self.mean) * e[0] * f[0]


def _dupe_with_lists() -> list[object]:
    t = torch.randn(3, 3) * 4
    return [[3, 2, 1], [4, 5, 6], t, t]


program("da_arg_dupe_many_args_param_non_tensor_arg_list", _dupe_with_lists)(_DupeList())


def _four_trunc(a, b, c, d):
    a.trunc_()
    b.trunc_()
    c.trunc_()
    d.trunc_()
    return (a + b + c + d,)


def _abcc() -> list[torch.Tensor]:
    a, b, c = (torch.randn(3, 3) * 4 for _ in range(3))
    return [a, b, c, c]


program("da_arg_dupe_many_args", _abcc)(_four_trunc)


@program("da_alias_inputs", lambda: [])
def _alias_inputs():
    a = torch.tensor([1])[0:1]
    b = a.squeeze()
    a[0] = 0
    if a[0] < 1e5:
        pass
    a[0] = 2
    return b


class _ReturnsInput(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, y):
        ctx.save_for_backward(x)
        return y

    @staticmethod
    def backward(ctx, grad):
        (x,) = ctx.saved_tensors
        return x, grad


program("da_grad_inputs_alias_inputs", lambda: [torch.ones(1), torch.ones(1)])(lambda x, y: _ReturnsInput.apply(x, y))
program("da_nn_parameter_construction", randn((4, 4)))(lambda x: x.sin() + torch.nn.Parameter(torch.ones(1)))


@program("da_aot_autograd_expand_mutation_functionalizes", lambda: [torch.arange(6)])
def _expand_mut(x):
    y = x.expand(3, *x.shape)
    y[0, 0].add_(5)
    return y


@program(
    "da_aot_autograd_expand_mutation_backwards",
    lambda: [torch.arange(6, dtype=torch.float), torch.arange(6, dtype=torch.float)],
)
def _expand_mut_bw(x, z):
    y = x.expand(3, *x.shape)
    y[1, 1].mul_(5)
    return y * z


@program("da_aot_autograd_expand_mutation_error", lambda: [torch.arange(6)])
def _expand_mut_err(x):
    y = x.expand(3, *x.shape)
    y[0:3, 0].add_(5)
    return y


@program("da_aot_autograd_raises_invalid_leaf_set", lambda: [torch.ones(2, requires_grad=True)], grad=False)
def _leaf_set(x):
    x.set_(torch.ones(2))


class _TangentMutation(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone(), x.clone()

    @staticmethod
    def backward(ctx, grad1, grad2):
        return grad1.copy_(grad2)


program("da_autograd_function_tangent_mutation", randn((4,)))(lambda x: _TangentMutation.apply(x))


@program("da_donated_buffer5", randn((3, 2), (2, 2)))
def _donated5(x, z):
    y = x.view(2, 3)
    return torch.mm(y, x) + torch.nn.functional.relu(z)


@program("da_donated_buffer6", randn((16,)))
def _donated6(x):
    p = torch.nn.Parameter(x + 123)
    return p, p.sin()


def _add_one_each(*args):
    for a in args:
        a.add_(1)
    return args[0]


def _views(*slices: tuple[int, int | None]):
    def make() -> list[torch.Tensor]:
        base = torch.arange(20, dtype=torch.float)
        return [base[s:e] for s, e in slices]

    return make


program("da_inputs_overlapping_with_mutation", _views((0, 5), (7, 13), (9, None)))(_add_one_each)
program("da_inputs_not_overlapping_with_mutation", _views((0, 5), (7, 13), (13, 15)))(_add_one_each)


@program("da_different_inputs_overlapping_set_with_mutation", _views((0, 5), (4, 9), (8, 13), (15, None)))
def _overlap_set(a, b, c, d):
    a.mul_(2)
    return a + b + c + d


program("da_no_storage_overlap_guards_no_mutation", _views((0, 10), (5, 15)))(lambda a, b: a + b)


@program(
    "da_no_storage_overlap_guards_no_aliasing",
    lambda: [torch.arange(20, dtype=torch.float)[:10], torch.arange(20, dtype=torch.float)[5:15]],
)
def _no_alias(a, b):
    a.add_(1)
    b.add_(1)
    return a


def _stress() -> list[torch.Tensor]:
    base = torch.arange(100)
    return [*base.split(10), base[4:44]]


program("da_inputs_overlapping_with_mutation_stress", _stress)(_add_one_each)


def _zero_dim_unique(sentinel):
    x = torch.reshape(torch.unique(torch.ones(1)), [1])
    return torch.squeeze(x) * sentinel


program("da_stride_reconstruction_on_zero_dim", lambda: [torch.tensor(1.0)], dynamo_config=DATA_DEP)(_zero_dim_unique)


@program(
    "da_unbacked_activation_specialized",
    lambda: [torch.randint(0, 3, (1, 2)), torch.tensor(1.0)],
    dynamo_config=DATA_DEP,
)
def _unbacked(arg_0, sentinel):
    a = torch.full((1, 2), -66, dtype=torch.int32) + torch.full((1, 2), 77, dtype=torch.int64)
    b = a * torch.full((1, 2), -64, dtype=torch.int32)
    c = b + torch.nonzero(torch.full((3, 4), False, dtype=torch.bool))
    return torch.div(arg_0, c) * sentinel


class _LayerNormGrad(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.layer_norm = torch.nn.LayerNorm(8)

    def forward(self, x):
        x = x.clone().requires_grad_(True)
        y = self.layer_norm(x)
        (g,) = torch.autograd.grad(y, x, grad_outputs=torch.ones_like(y), create_graph=True, allow_unused=True)
        return y, g


program("da_layer_norm_double_backward", randn((4, 8)), grad=False)(_LayerNormGrad())


def _maybe_dupe_op(x):
    y = x + 1
    return (y, y) if x.numel() < 5 else (y, x + 2)


_lib = torch.library.Library(NS, "FRAGMENT")  # noqa: TOR901  (lives as long as the process)
if not hasattr(getattr(torch.ops, NS), "maybe_dupe_op"):
    _lib.define("maybe_dupe_op(Tensor a) -> (Tensor, Tensor)")
    _lib.impl("maybe_dupe_op", _maybe_dupe_op, "CPU")
    _lib.impl("maybe_dupe_op", _maybe_dupe_op, "Meta")


def _dupe_mul(a):
    b, c = getattr(torch.ops, NS).maybe_dupe_op(a)
    return (b.mul_(c),)


program("da_maybe_dupe_op_same_outputs", lambda: [torch.ones(4)], grad=False)(_dupe_mul)
program("da_maybe_dupe_op_distinct_outputs", lambda: [torch.ones(6)], grad=False)(_dupe_mul)
