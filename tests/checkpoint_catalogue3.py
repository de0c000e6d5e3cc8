"""The rest of PyTorch's ``test/dynamo/test_activation_checkpointing.py`` (commit
0069a4184a83906c61f844b32e90e3a87705344a) as programs of
:data:`checkpoint_catalogue.PROGRAMS` (importing this module registers them):
a checkpointed function appending to a list it is given, the
``torch.distributed`` checkpoint wrappers, pytree dataclasses in and out, and
the modules of ``ActivationCheckpointingNonStrictTracerTests`` (a parameter
used inside the checkpoint; a selective policy; dropout), whose gradients with
respect to the parameters the checker compares. The programs that run a backward
inside the compiled function, or compile inside a checkpoint, are
``ca_program_harness`` programs: :mod:`checkpoint_hook_programs`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import torch
import torch.utils._pytree as pytree
from checkpoint_catalogue import fn, program
from dynamo_repro_programs import randn
from torch import nn
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts


def _append_sin(x: torch.Tensor, z: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    out = x.sin()
    z.append(out)
    return torch.cos(torch.sin(torch.matmul(x, x) @ x)), out


@fn("nonlocal_list_mutation", randn((4, 4)))
def _list_mutation(x):
    z: list[torch.Tensor] = []
    out1, _ = checkpoint(_append_sin, x, z, use_reentrant=False)
    return out1, z[0]


def _append_hidden(x: torch.Tensor, z: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    o = torch.matmul(x, x) @ x
    z.append(x.sin())
    return torch.cos(torch.sin(o)), torch.sin(x)


@fn("nonlocal_list_mutation_hidden", randn((4, 4)))
def _list_mutation_hidden(x):
    z: list[torch.Tensor] = []
    outs = checkpoint(_append_hidden, x, z, use_reentrant=False)
    return outs[0] + outs[-1], z[0]


class _SinLinearCos(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(4, 4)
        self.c = 2

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cos(self.linear(torch.sin(x))) * self.c


@program("distributed_utils_checkpoint_wrapper", randn((4, 4)))
def _dist_wrapper():
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import checkpoint_wrapper

    return checkpoint_wrapper(_SinLinearCos())


@program("distributed_utils_checkpoint_wrapper_reentrant", randn((4, 4)), reentrant=True)
def _dist_wrapper_reentrant():
    from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointImpl, checkpoint_wrapper

    return checkpoint_wrapper(_SinLinearCos(), checkpoint_impl=CheckpointImpl.REENTRANT)


class _WrappedTimesAttr(nn.Module):
    """``mod(x) * mod.a``: an attribute read through ``CheckpointWrapper.__getattr__``."""

    def __init__(self) -> None:
        super().__init__()
        from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import CheckpointWrapper

        lin = nn.Linear(1, 1)
        self.mod = CheckpointWrapper(nn.Sequential(lin, lin))
        self.mod._checkpoint_wrapped_module.a = torch.ones(1, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.mod(x) * self.mod.a


@program("dynamo_does_not_trace_getattr_as_top_frame", randn((1, 1)))
def _getattr_top_frame():
    return _WrappedTimesAttr()


@dataclasses.dataclass(frozen=True)
class InputNode:
    x: torch.Tensor


@dataclasses.dataclass(frozen=True)
class OutputNode:
    y: torch.Tensor


pytree.register_dataclass(InputNode)
pytree.register_dataclass(OutputNode)


class _TinyMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = nn.Linear(4, 8)
        self.fc2 = nn.Linear(8, 4)

    def forward(self, inp: InputNode) -> OutputNode:
        return OutputNode(y=self.fc2(nn.functional.silu(self.fc1(inp.x))))


class _CheckpointedMLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.mlp = _TinyMLP()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # upstream passes the dataclass in; the checker's inputs are tensors, so it is made here
        out = checkpoint(self.mlp.forward, InputNode(x=x), use_reentrant=False, preserve_rng_state=True)
        return out.y


@program("frozen_dataclass_pytree_output", randn((2, 4)))
def _dataclass_out():
    return _CheckpointedMLP()


class _SinOfMatmul(nn.Module):
    """A parameter used inside the checkpointed function (the non-strict tracer tests' model)."""

    def __init__(self, context_fn: Any = None, dropout: bool = False) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))
        self.context_fn = context_fn
        self.dropout = dropout

    def body(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.sin(x @ self.w)
        return nn.functional.dropout(y, p=0.5) if self.dropout else y

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.context_fn is None:
            return checkpoint(self.body, x, use_reentrant=False, preserve_rng_state=True)
        return checkpoint(self.body, x, use_reentrant=False, context_fn=self.context_fn)


def _mm_recomputed_rest_saved() -> Any:
    def policy(ctx: Any, func: Any, *a: Any, **k: Any) -> CheckpointPolicy:
        if func == torch.ops.aten.mm.default:
            return CheckpointPolicy.PREFER_RECOMPUTE
        return CheckpointPolicy.MUST_SAVE

    return create_selective_checkpoint_contexts(policy)


@program("checkpoint_traces_through_eager_ac_under_non_strict", randn((2, 4)))
def _param_inside():
    return _SinOfMatmul()


@program("sac_traces_through_eager_ac_under_non_strict", randn((2, 4)))
def _param_inside_sac():
    return _SinOfMatmul(context_fn=_mm_recomputed_rest_saved)


@program("checkpoint_with_rng_op_under_non_strict", randn((2, 4)))
def _param_inside_dropout():
    return _SinOfMatmul(dropout=True)


class _Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm1 = nn.RMSNorm(dim)
        self.linear1 = nn.Linear(dim, dim, bias=False)
        self.norm2 = nn.RMSNorm(dim)
        self.linear2 = nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.linear1(self.norm1(x))
        return x + self.linear2(self.norm2(x))


class _CheckpointedBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = _Block(8)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return checkpoint(self.block, x, use_reentrant=False)


@program("checkpointed_block", randn((4, 8)))
def _checkpointed_block():
    # upstream's test_attr_compile_submodules_in_checkpoint_wrapper compiles the
    # submodules; here the whole wrapper (the submodules compiled: checkpoint_hook_programs)
    return _CheckpointedBlock()
