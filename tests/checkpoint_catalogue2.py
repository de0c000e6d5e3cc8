"""Selective activation checkpointing programs transcribed from PyTorch's
``test/dynamo/test_activation_checkpointing.py`` (commit
0069a4184a83906c61f844b32e90e3a87705344a): ``checkpoint(..., use_reentrant=False,
context_fn=...)`` with policies from ``create_selective_checkpoint_contexts``
(ops that must be saved, must be recomputed, a stateful rule counting calls, a
``functools.partial`` context function, a policy object, random ops, lists,
tensor subclasses, in-place ops, parametrizations, an invalid context). Upstream
counts the ops its partitioner recomputes; here outputs and gradients are checked
against eager. Registered in :data:`checkpoint_catalogue.PROGRAMS` (importing this
module registers them), names prefixed ``sac_`` where upstream's are not.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from checkpoint_catalogue import fn, program
from dynamo_repro_programs import args, randn
from torch import nn
from torch.testing._internal.two_tensor import TwoTensor
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

aten = torch.ops.aten


def _policy(no_recompute: list[Any] | None = None, must_recompute: list[Any] | None = None) -> Any:
    def policy(ctx: Any, func: Any, *a: Any, **k: Any) -> CheckpointPolicy:
        if no_recompute is not None and func in no_recompute:
            return CheckpointPolicy.MUST_SAVE
        if must_recompute is not None and func in must_recompute:
            return CheckpointPolicy.MUST_RECOMPUTE
        return CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def _contexts(no_recompute: list[Any] | None = None, must_recompute: list[Any] | None = None) -> Any:
    return lambda: create_selective_checkpoint_contexts(_policy(no_recompute, must_recompute))


# context functions made outside the program (one made while dynamo traces is a NestedUserFunctionVariable
# torch.compile refuses: sac_context_fn_made_inside)
_RECOMPUTE_MM = _contexts(must_recompute=[aten.mm.default])
_SAVE_NOTHING = _contexts(no_recompute=[])
_SAVE_MM_SIGMOID = _contexts(no_recompute=[aten.mm.default, aten.sigmoid.default])
_SAVE_MM = _contexts(no_recompute=[aten.mm.default])
_SAVE_SIGMOID = _contexts(no_recompute=[aten.sigmoid.default])


def _sac(f: Any, context_fn: Any, *xs: Any, **kw: Any) -> Any:
    return checkpoint(f, *xs, use_reentrant=False, context_fn=context_fn, **kw)


def _mm3(x: torch.Tensor) -> torch.Tensor:
    return torch.cos(torch.sin(torch.matmul(x, x) @ x))


@fn("compile_selective_checkpoint_must_recompute", randn((4, 4)))
def _must_recompute(x):
    return _sac(_mm3, _RECOMPUTE_MM, x)


@fn("compile_selective_checkpoint_no_recompute", randn((4, 4)))
def _no_recompute(x):
    return _sac(_mm3, _SAVE_MM, x)


def _gemm(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(torch.matmul(torch.matmul(x, y), y)) * y


class _AlwaysSave:
    # upstream's policy object takes (ctx, out, func, ...): the op lands in ``out``
    def __call__(self, ctx: Any, out: Any, func: Any = None, *a: Any, **k: Any) -> CheckpointPolicy:
        return CheckpointPolicy.MUST_SAVE


@fn("sac_with_partial_context_fn", randn((4, 4), (4, 4)))
def _partial_policy_object(x, y):
    return _sac(_gemm, functools.partial(create_selective_checkpoint_contexts, _AlwaysSave()), x, y)


@fn("compile_selective_checkpoint_must_not_recompute_gemm", randn((4, 4), (4, 4)))
def _not_gemm(x, y):
    return _sac(_gemm, _SAVE_MM, x, y)


class _AddOne(torch.autograd.Function):
    # upstream's runs a Triton kernel (GPU only); here the same Function on CPU
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        return x + 1

    @staticmethod
    def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
        return g


def _gemm_add_one(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(torch.matmul(torch.matmul(_AddOne.apply(x.sin()), y), y)) * y


@fn("compile_selective_checkpoint_autograd_function", randn((4, 4), (4, 4)))
def _sac_function(x, y):
    return _sac(_gemm_add_one, _SAVE_MM, x, y)


def _two_twos() -> list[Any]:
    r = torch.randn(4, 4)
    return [TwoTensor(r, r.clone()), TwoTensor(r.clone(), r.clone())]


@fn("compile_selective_checkpoint_tensor_subclass", _two_twos)
def _sac_subclass(x, y):
    return _sac(_gemm, _SAVE_MM, x, y)


def _counting_context() -> Any:
    meta: dict[str, int] = {}

    def policy(mode: Any, func: Any, *a: Any, **k: Any) -> bool:
        key = f"{mode}_mm_count"
        meta.setdefault(key, 0)
        if func == aten.mm.default:
            meta[key] += 1
        # saves every mm but the second (a bool: the older form of a policy)
        return func == aten.mm.default and meta[key] != 2

    return create_selective_checkpoint_contexts(policy)


def _gemm_custom(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(torch.sigmoid(torch.matmul(torch.matmul(x, y) * y, y) * y))


@fn("compile_selective_checkpoint_custom_rule", randn((4, 4), (4, 4)))
def _custom_rule(x, y):
    return _sac(_gemm_custom, _counting_context, x, y)


def _listed_context(no_recompute: list[Any]) -> Any:
    return create_selective_checkpoint_contexts(_policy(no_recompute))


@fn("compile_selective_checkpoint_partial_ctx_fn", randn((4, 4), (4, 4)))
def _partial_ctx(x, y):
    return _sac(_gemm, functools.partial(_listed_context, [aten.mm.default]), x, y)


def _outplace(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(torch.selu(torch.matmul(torch.matmul(x, y), y))).relu()


@fn("compile_selective_checkpoint_outplace_op", randn((4, 4), (4, 4)))
def _outplace_op(x, y):
    return _sac(_outplace, _SAVE_MM_SIGMOID, x, y)


@fn("compile_selective_checkpoint_list_ops", randn((4, 4), (4, 4)))
def _list_ops(x, y):
    return _sac(lambda a, b: torch.cat([a, b]).sin(), _SAVE_NOTHING, x, y)


def _inplace(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(torch.selu_(torch.matmul(torch.matmul(x, y), y))).relu_()


@fn("compile_selective_checkpoint_inplace_op", randn((4, 4), (4, 4)))
def _inplace_op(x, y):
    # skipped upstream (in-place ops under SAC with torch.compile unfinished); eager runs it
    return _sac(_inplace, _SAVE_MM_SIGMOID, x, y)


def _dropout_between(x: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(torch.dropout(torch.sigmoid(x), p=0.5, train=True))


@fn("compile_selective_checkpoint_random_op", randn((4, 4)))
def _random_op(x):
    return _sac(_dropout_between, _SAVE_SIGMOID, x, preserve_rng_state=True)


@fn("compile_selective_checkpoint_random_op_no_preserve", randn((4, 4)))
def _random_op_np(x):
    # eager recomputes the dropout with the generator as the backward finds it
    return _sac(_dropout_between, _SAVE_SIGMOID, x, preserve_rng_state=False)


class _NotAMode:
    def __enter__(self) -> _NotAMode:
        return self

    def __exit__(self, *exc: Any) -> None:
        pass


def _invalid_context_gen() -> tuple[_NotAMode, _NotAMode]:
    return _NotAMode(), _NotAMode()


@fn("compile_selective_checkpoint_invalid_context", randn((4, 4), (4, 4)))
def _invalid_context(x, y):
    # eager raises: the context function must give two TorchDispatchModes
    return _sac(lambda a, b: torch.sigmoid(torch.matmul(a, b)) * b, _invalid_context_gen, x, y)


def _recompute_mul_sigmoid() -> Any:
    def policy(ctx: Any, func: Any, *a: Any, **k: Any) -> CheckpointPolicy:
        if func in {aten.mul.Tensor, aten.sigmoid.default}:
            return CheckpointPolicy.MUST_RECOMPUTE
        return CheckpointPolicy.MUST_SAVE

    return create_selective_checkpoint_contexts(policy)


class _Parametrization(nn.Module):
    def parametrization(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(torch.mul(x, x))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return checkpoint(self.parametrization, x, use_reentrant=False, context_fn=_recompute_mul_sigmoid)


@program("compile_selective_checkpoint_parametrization", randn((8, 16)))
def _parametrized():
    net = nn.Linear(16, 16, bias=False)
    net.register_parameter("weight", nn.Parameter(net.weight))
    nn.utils.parametrize.register_parametrization(net, "weight", _Parametrization(), unsafe=True)
    return net


def _must_save(*ops: Any) -> Any:
    def policy(ctx: Any, func: Any, *a: Any, **k: Any) -> CheckpointPolicy:
        return CheckpointPolicy.MUST_SAVE if func in ops else CheckpointPolicy.PREFER_RECOMPUTE

    return functools.partial(create_selective_checkpoint_contexts, policy)


def _detach_add_cos(x: torch.Tensor) -> torch.Tensor:
    a = x.sin()
    return (a.detach() + a).cos()


@fn("pre_mode_decomp_has_sac_ignored_ops", randn((4,)))
def _detach_ops(x):
    return _sac(_detach_add_cos, _must_save(aten.sin.default, aten.add.Tensor, aten.cos.default), x)


@fn("post_mode_decomp", randn((4,)))
def _silu_saved(x):
    return _sac(lambda a: nn.functional.silu(a.sin()).cos(), _must_save(aten.silu.default), x)


@fn("multi_output_op", randn((4,)))
def _topk_saved(x):
    return _sac(lambda a: torch.topk(a.sin(), k=2)[0].sum().cos(), _must_save(aten.topk.default), x)


@fn("sac_kwargs_and_tuple", args(lambda: torch.randn(4, 4), lambda: torch.randn(4, 4), lambda: 0.5))
def _sac_kwargs(x, y, s):
    # not upstream's: a keyword argument and a tuple out of a selective checkpoint
    def body(a: torch.Tensor, *, b: torch.Tensor, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
        m = a @ b
        return m.sigmoid() * scale, (m * b).relu()

    p, q = _sac(body, _SAVE_MM, x, b=y, scale=s)
    return p + q


@fn("sac_context_fn_made_inside", randn((4, 4)))
def _made_inside(x):
    # not upstream's: the context function is made while the program runs
    return _sac(_mm3, _contexts(no_recompute=[aten.mm.default]), x)
