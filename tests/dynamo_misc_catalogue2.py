"""Programs transcribed from PyTorch's ``test/dynamo/test_misc.py`` and
``test/dynamo/test_input_attr_tracking.py`` (second part, see ``dynamo_misc_catalogue``):
``requires_grad``/``.grad``/``backward`` inside the program, grad mode and inference
mode, random numbers, dtype conversions and tensor attributes (``.real``, ``.T``,
``.layout``); ``dynamo_misc_catalogue3``: module and closure state, attributes on input
tensors, objects mutated in place. Registered in :data:`dynamo_misc_catalogue.PROGRAMS`."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from dynamo_misc_catalogue import fn
from dynamo_repro_programs import args, randn
from torch import nn

# -- .grad, backward and hooks inside the program -------------------------------------------


def _leaves(*shapes: tuple[int, ...]):
    return lambda: [torch.randn(*s, requires_grad=True) for s in shapes]


@fn("grad", _leaves((4,), (4,)), no_grad_variant=True)
def _grad(a, b):
    out = a * b
    out.sum().backward()
    return torch.sigmoid(a.grad + b)


@fn(
    "intermediary_tensor_grad_access",
    args(lambda: torch.ones(2, 2, requires_grad=True), lambda: torch.ones(2, 2)),
    no_grad_variant=True,
)
def _intermediary_grad(a, b):
    intermediary = torch.ones(2, 2)
    c = a + intermediary
    return [intermediary.grad], c


@fn(
    "tensor_dot_grad_no_graph_break",
    args(lambda: torch.tensor([2.0, 3.0], requires_grad=True), lambda: torch.tensor([6.0, 4.0], requires_grad=True)),
    no_grad_variant=True,
)
def _tensor_dot_grad(a, b):
    y = 3 * a**3 - b**2
    y.backward(gradient=torch.tensor([1.0, 1.0]))
    b.grad.zero_()
    return a.grad * 1, b.grad * 1


@fn("grad_none", args(lambda: torch.randn(2, 2), lambda: torch.arange(4.0).reshape(2, 2)))
def _grad_none(x, y):
    x.grad = torch.abs(y)
    x.grad.add_(y)
    return torch.abs(y), x.grad


@fn("newly_constructed_tensor_attr_mutation", args(lambda: torch.ones(5)))
def _newly_constructed_attr(x):
    y = x + 10
    y.grad = x
    y.foo = 42
    return y, y.grad, y.foo


@fn("escaping_closure_var_with_backward_hook", randn((4,)))
def _escaping_hook(x):
    temp = x * x
    captured_var = temp + 1
    x.register_hook(lambda _: captured_var)
    return temp


@fn("retain_grad", randn((4,), (4,)))
def _retain_grad(x, y):
    y.retain_grad()
    return torch.sin(y) + x


class _MatmulFolding(torch.autograd.Function):
    @staticmethod
    def forward(ctx, inp1, inp2):
        ctx.save_for_backward(inp2)
        ctx.output_shape = inp1.size()
        return torch.matmul(inp1, inp2)

    @staticmethod
    def backward(ctx, grad_output):
        (inp2,) = ctx.saved_tensors
        return torch.mm(grad_output.squeeze(), inp2.t()).view(ctx.output_shape), None


@fn("autograd_function_with_matmul_folding_at_output", randn((4, 1, 2), (2, 4)))
def _matmul_folding(inp1, inp2):
    res = _MatmulFolding.apply(inp1, inp2)
    res.add_(1.0)
    return res.sum()


@fn("autograd_function_with_matmul_folding_at_output_usual", randn((4, 1, 2), (2, 4)))
def _matmul_folding_usual(inp1, inp2):
    res = torch.matmul(inp1, inp2)
    res.add_(1.0)
    return res.sum()


# -- grad mode, inference mode, other global state ----------------------------------------


@fn("inplace_param_update", args(lambda: nn.Parameter(torch.randn(4)), lambda: torch.randn(4)))
def _inplace_param_update(param, y):
    prev_grad = torch.is_grad_enabled()
    try:
        torch.set_grad_enabled(False)
        torch.set_grad_enabled(True)
        torch.set_grad_enabled(False)
        param.add_(y)
    finally:
        torch.set_grad_enabled(prev_grad)


@fn("inference_mode", randn((4,), (4,)))
@torch.inference_mode()
def _inference_mode(x, y):
    return x.add(1.0) + y


@fn("inference_mode_param", randn((4,)))
def _inference_mode_param(x):
    p = nn.Parameter(x, requires_grad=False)
    return x * p


@fn("nested_sequential_with", randn((3,)))
def _nested_sequential_with(x):
    with torch.set_grad_enabled(True):
        with torch.set_grad_enabled(False):
            x = x + 1
        with torch.set_grad_enabled(True):
            x = x + 1
        return x


@fn("nested_sequential_try_with", randn((3,)))
def _nested_sequential_try_with(x):
    with torch.set_grad_enabled(True):
        try:
            x = x + 1
        except Exception:
            pass
        try:
            with torch.set_grad_enabled(False):
                x = x * 2
        except Exception:
            pass
    return x


for _n in (0, 1):

    @fn(f"nested_sequential_try_with_graph_break_{_n}", randn((3,)))
    def _try_with_graph_break(x, n=_n):
        with torch.set_grad_enabled(True):
            with torch.set_grad_enabled(False):
                x = x + 1
                torch._dynamo.graph_break()
            try:
                with torch.set_grad_enabled(False):
                    x = x * 2
                    if n == 0:
                        torch._dynamo.graph_break()
            except Exception:
                pass
            with torch.set_grad_enabled(False):
                x = x + 1
                torch._dynamo.graph_break()
            x = x * 3
        return x


# -- random numbers --------------------------------------------------------------------------


@fn("torch_seed_manual", randn((4,)))
def _torch_seed_manual(x):
    torch.manual_seed(123)
    return x + torch.randn_like(x)


@fn("torch_generator_set_state", randn((2, 3)))
def _generator_set_state(t):
    default_state = torch.default_generator.get_state()
    x = torch.rand([2, 3])
    torch._dynamo.graph_break()
    torch.default_generator.set_state(default_state)
    y = torch.rand([2, 3])
    return x * 2 + t, y


@fn("rand", randn((10,)))
def _rand(x):
    return torch.randn(10) + x


@fn("randint_no_graphbreak", args(lambda: torch.ones([1], dtype=torch.int64), lambda: torch.tensor(5)))
def _randint(actions, n_act):
    return torch.randint_like(actions, n_act)


@fn("full_graph_capture_scalar_outputs", args(lambda: torch.tensor(2.0)))
def _randn_times_item(a):
    return torch.randn(5) * a.item()


@fn("tensorify_track_item_symint", randn((1, 3, 16, 16)))
def _random_resize(image):
    new_nump = torch.randint(2, 5, (1,)).item()
    torch._check(new_nump > 0)
    out = F.interpolate(image, size=(new_nump * 4, new_nump * 4), mode="bilinear", align_corners=True)
    return out.shape[2:], out


# -- dtype conversions and tensor attributes ----------------------------------------------


def _cplx():
    return torch.complex(torch.rand(4, 4), torch.rand(4, 4))


@fn("real_imag_tensor_attribute", args(_cplx, lambda: torch.rand(4, 4)))
def _real_imag(x, y):
    return torch.mul(torch.add(x.real, y), x.imag)


@fn("recursive_tensor_attribute", args(_cplx, lambda: torch.rand(4, 4)))
def _recursive_attr(x, y):
    return torch.mul(torch.add(x.real.T, y), x.imag), x.real


@fn("T_tensor_attribute", randn((4, 4), (4, 4)))
def _T_attr(x, y):
    return torch.add(x.T, y), x.T


@fn("with_builtin_type", randn((5,)))
def _with_builtin_type(x):
    return (x * 5).to(bool).to(float).to(int) + 8


@fn("tensor_layout", randn((2, 3)))
def _tensor_layout(x):
    return torch.zeros([x.size()[0], x.size()[1]], dtype=x.dtype, layout=x.layout, device=x.device) + x


@fn("torch_dtype_python_type", args(lambda: torch.tensor([2, 3], dtype=torch.float16)))
def _dtype_python_type(target):
    return torch.zeros(2, 3, dtype=target.dtype) + target.sum()


@fn("foreach_tensor_scalar", randn((4, 4), (4, 4), (4, 4)))
def _foreach_tensor_scalar(a, b, c):
    val = torch.tensor(0.5, dtype=torch.float64)
    return (
        torch._foreach_addcmul([a], [b], [c], value=1 - val),
        torch._foreach_add([a], 1 - val),
        torch._foreach_mul([b], 1 - val),
        torch._foreach_pow([c.abs()], 1 - val.item()),
    )


@fn("item", args(lambda: torch.tensor([[10.6763, 11.7445, -2.2369]])))
def _item(x):
    return torch.max(x).int().item(), x * 2


@fn("inline_func_jump_on_tensor_condition", args(lambda: torch.tensor([0.0])))
def _jump_on_tensor(x):
    if x == 0:
        return x + 1
    return x + 2


@fn("dynamic_one_hot", args(lambda: torch.arange(20) % 4))
def _dynamic_one_hot(x):
    x = x + 1
    x = F.one_hot(x)
    return x + 1


@fn("set_aliasing_recompiles", randn((10,), (10,), (10,)))
def _set_aliasing(a, b, c):
    return a + len({a, b, c}), c * 2


fn("set_aliasing_recompiles_same_tensor", lambda: [torch.randn(10)] * 3)(_set_aliasing)


@fn("tensor_share_memory", randn((4, 10)))
def _share_memory(x):
    h = torch.zeros(2, x.size(0), 6).share_memory_()
    c = torch.zeros(2, x.size(0), 6)
    return x + h.sum() + c.sum()


@fn("cross_entropy_loss_fancy_ctor2", args(lambda: torch.randn(3, 5), lambda: torch.tensor([1, 0, 4])))
def _cross_entropy(x, target):
    return nn.CrossEntropyLoss(reduction="none", label_smoothing=0.5)(x, target)


@fn("nn_functional_reduction", args(lambda: torch.rand(3, 5), lambda: "mean"), dynamo_only=True)
def _reduction(loss, reduction):
    enum = F._Reduction.get_enum(reduction)
    return loss if enum == 0 else loss.mean() if enum == 1 else loss.sum()
