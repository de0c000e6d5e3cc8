"""Programs applying custom ``torch.autograd.Function``s, each modelled on a
case of PyTorch's ``test/dynamo/test_autograd_function.py`` (named in
``source``; rewritten here, not copied): ctx attributes, ``setup_context``,
``needs_input_grad``, materialized and non-materialized grads, a print and
a stride read in the backward, saved outputs, enum and class-method
Functions, ``once_differentiable``, several outputs, ``.data`` in the
backward, ``custom_fwd``/``custom_bwd``, containers of tensors, a backward
returning ``None`` for a tensor. Run by ``test_autograd_function_programs``
through ``conveyor.compile`` and ``torch.compile(backend="conveyor")``
against eager.

``fallback``: the Function cannot be one node (it returns its input, takes
tensors inside a container, returns a non-tensor); conveyor.compile runs it
eagerly, with a warning. ``xfail``: entry point -> why it differs.
"""

from __future__ import annotations

import enum
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch.autograd.function import once_differentiable

SOURCE = "test/dynamo/test_autograd_function.py"
LOG: list[Any] = []


@dataclass(frozen=True)
class Program:
    name: str
    source: str
    fn: Callable[..., Any]
    inputs: Callable[[], tuple[Any, ...]]
    fallback: bool = False
    xfail: dict[str, str] = field(default_factory=dict)


def _r(*shape: int, grad: bool = True, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, dtype=dtype, requires_grad=grad)


class _CtxScale(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.factor = 4
        return x.cos()

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        LOG.append("ctx_scale")
        return g * ctx.factor


class _Lin(torch.autograd.Function):
    @staticmethod
    def forward(a: torch.Tensor, w: torch.Tensor, b: torch.Tensor | None) -> torch.Tensor:
        y = a.mm(w.t())
        return y + b if b is not None else y

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.save_for_backward(*inputs[:2])
        ctx.has_bias = inputs[2] is not None

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[Any, Any, Any]:
        a, w = ctx.saved_tensors
        LOG.append(("lin", ctx.needs_input_grad))
        ga = g.mm(w) if ctx.needs_input_grad[0] else None
        gw = g.t().mm(a) if ctx.needs_input_grad[1] else None
        gb = g.sum(0) if ctx.has_bias and ctx.needs_input_grad[2] else None
        return ga, gw, gb


class _Twin(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ctx.set_materialize_grads(False)
        return x * 1.5, x * 2.5

    @staticmethod
    def backward(ctx: Any, g1: Any, g2: Any) -> torch.Tensor:
        LOG.append(("twin", g1 is None, g2 is None))
        return (g1 if g1 is not None else 0) + (g2 * 3 if g2 is not None else 0)


class _Printing(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return torch.add(x, x)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        print("backward of _Printing")  # noqa: T201  (a side effect at run time)
        LOG.append("printed")
        return g


class _StrideRead(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x + x

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return g * g.stride()[-1]


class _SavesResult(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        y = x * 3
        ctx.save_for_backward(y)
        return y

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        (y,) = ctx.saved_tensors
        return g * math.sqrt(y.numel()) + y * 0


class Mode(enum.Enum):
    SIN = 0
    COS = 1


class _ByEnum(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, mode: Mode) -> torch.Tensor:
        ctx.mode = mode
        return x.sin() if mode is Mode.SIN else x.cos()

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None]:
        return (g * 2 if ctx.mode is Mode.SIN else g * -2), None


class _Halve(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x  # its input itself: not one node

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return g * 0.5


class _HalveCopy(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    @once_differentiable
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return g * 0.5


class _ClassMethods(torch.autograd.Function):
    @classmethod
    def forward(cls, ctx: Any, x: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return x + x

    @classmethod
    def backward(cls, ctx: Any, g: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        return g * 7


class _Pair(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x.clone(), x.clone()

    @staticmethod
    def backward(ctx: Any, g1: torch.Tensor, g2: torch.Tensor) -> torch.Tensor:
        return g1 + 2 * g2


class _MaskByData(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x * 3

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        out = g.clone()
        out.data[x.data < 0] = 0  # through .data: a real tensor's values
        return out * 3


class _GradModeInBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return torch.sin(x + 1)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        if g.requires_grad:  # never, without create_graph
            return g * torch.sin(x + 1)
        return g * torch.cos(x + 1)


class _AmpMM(torch.autograd.Function):
    @staticmethod
    @torch.amp.custom_fwd(device_type="cpu")
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(a, b)
        return a.mm(b)

    @staticmethod
    @torch.amp.custom_bwd(device_type="cpu")
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a, b = ctx.saved_tensors
        return g.mm(b.t()), a.t().mm(g)


class _FromList(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, ts: list[torch.Tensor]) -> torch.Tensor:
        ctx.save_for_backward(ts[0], ts[1])
        return x.clone() * (ts[0] + ts[1])

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None]:
        a, b = ctx.saved_tensors
        return g * (a + b), None


class _NoneForTensor(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(y)
        return x.clone() * y

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None]:
        (y,) = ctx.saved_tensors
        return g * y, None


class _ClampBelow(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, bound: float) -> torch.Tensor:
        ctx.save_for_backward(x, x.new_ones(1) * bound)
        return x.clamp(min=bound)

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> tuple[torch.Tensor, None]:
        x, bound = ctx.saved_tensors
        return (x >= bound) * g, None


class _WithConstant(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> tuple[torch.Tensor, list[int]]:
        return x * 2, [1, 2, 3]

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor, _: Any) -> torch.Tensor:
        return g


class _ProdLast(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        y = x.prod(dim=-1).prod(dim=-1)
        ctx.save_for_backward(x, y)
        return y

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        x, y = ctx.saved_tensors
        return (g * y)[:, None, None] / x


class _SquareViaOutput(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        y = x**2
        ctx.save_for_backward(x, y)
        return y

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        x, y = ctx.saved_tensors
        return g * 2 * y / x  # reads the saved output


class _AddPair(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return a * 1, a + b

    @staticmethod
    def backward(ctx: Any, ga: torch.Tensor, gb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return ga + gb, gb


class _ViewOfIntermediate(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x.clone()[:3]

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        out = g.new_zeros(5, 2)
        out[:3] = g
        return out


PROGRAMS = [
    Program("ctx_attribute", "test_function_ctx_does_not_instantiate_function", lambda x: _CtxScale.apply(x * 1), lambda: (_r(3),)),
    Program("setup_context_linear", "test_linear_setup_context", lambda a, w: _Lin.apply(a, w, None), lambda: (_r(2, 2, dtype=torch.double), _r(3, 2, dtype=torch.double))),
    Program("setup_context_bias_no_grad", "test_linear_setup_context", lambda a, w, b: _Lin.apply(a, w, b), lambda: (_r(2, 2), _r(3, 2, grad=False), _r(3))),
    Program("materialize_false", "test_materialize_grad", lambda x: _Twin.apply(x * 1)[0].sum(), lambda: (_r(2, 2, dtype=torch.double),)),
    Program("materialize_both", "test_materialize_grad", lambda x: sum(o.sum() for o in _Twin.apply(x * 1)), lambda: (_r(2, 2),)),
    Program("print_in_backward", "test_print_in_bwd", lambda x: _Printing.apply(x * 1), lambda: (_r(2, 2, dtype=torch.double),)),
    Program("stride_in_backward", "test_stride_in_bwd", lambda x: _StrideRead.apply(x * 1), lambda: (_r(2, 2, dtype=torch.double),)),
    Program("save_output", "test_save_for_bwd", lambda x: _SavesResult.apply(x * 1), lambda: (_r(2, 2, dtype=torch.double),)),
    Program("enum_argument", "test_enum_arg", lambda x: _ByEnum.apply(x * 1, Mode.COS), lambda: (_r(2, 3),)),
    Program("once_differentiable_identity", "test_once_differentiable", lambda x: _Halve.apply(x * 1), lambda: (_r(3),), fallback=True),
    Program("once_differentiable", "test_once_differentiable", lambda x: _HalveCopy.apply(x * 1), lambda: (_r(3),)),
    Program("classmethods", "test_classmethod", lambda x: _ClassMethods.apply(x * 1), lambda: (_r(4, 4),)),
    Program("multi_output", "test_multi_output", lambda x: _Pair.apply(x * 1), lambda: (_r(3),)),
    Program("data_in_backward", "test_data_in_bwd", lambda x: _MaskByData.apply(x * 1), lambda: (torch.tensor([-2.0, 1.0, 3.0], requires_grad=True),)),
    Program("grad_mode_in_backward", "test_requires_grad_in_bwd", lambda x: _GradModeInBackward.apply(x * 1), lambda: (_r(2),)),
    Program("amp_custom_fwd_bwd", "test_amp_custom_fwd_bwd", lambda a, b: _AmpMM.apply(a * 1, b), lambda: (_r(8, 8), _r(8, 8))),
    Program("tensor_list_input", "test_tensor_list_as_input", lambda x, a, b: _FromList.apply(x * 1, [a, b]), lambda: (_r(()), _r(()), _r(())), fallback=True),
    Program(
        "none_for_a_tensor",
        "test_backward_returns_none_for_tensor_input",
        lambda x, y: _NoneForTensor.apply(x * 1, y),
        lambda: (_r(()), _r(())),
    ),
    Program("bound_free_variable", "test_function_with_bound_free_variable", lambda x, p: x + _ClampBelow.apply(p, 1), lambda: (_r(2, 4, grad=False), torch.rand(2, 4, requires_grad=True) * 2)),
    Program("returns_a_constant", "test_forward_returns_constant", lambda x: _WithConstant.apply(x * 1)[0], lambda: (_r(()),), fallback=True),
    Program("prod_saved_output", "test_smoke_from_test_autograd", lambda x: _ProdLast.apply(x * 1), lambda: (torch.rand(2, 4, 4).add(0.5).requires_grad_(),)),
    Program("backward_reads_output", "test_smoke_from_test_autograd", lambda x: _SquareViaOutput.apply(x * 1), lambda: (torch.rand(3, dtype=torch.double).add(0.5).requires_grad_(),)),
    Program("two_in_two_out", "test_smoke_from_test_autograd", lambda a, b: _AddPair.apply(a * 1, b), lambda: (_r(5, 5), _r(5, 5))),
    Program("view_of_intermediate", "test_smoke_from_test_autograd", lambda x: _ViewOfIntermediate.apply(x * 1), lambda: (_r(5, 2),)),
]
