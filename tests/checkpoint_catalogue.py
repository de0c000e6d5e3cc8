"""Programs transcribed from PyTorch's ``test/dynamo/test_activation_checkpointing.py``
(commit 0069a4184a83906c61f844b32e90e3a87705344a), class
``ActivationCheckpointingViaTagsTests``: ``torch.utils.checkpoint`` reentrant and
non-reentrant, several checkpoints in a row, checkpointed modules, random ops and
dropout recomputed in the backward, keyword arguments, graph breaks inside the
checkpointed function, lists in and out. The selective-checkpointing programs
(policies) are in :mod:`checkpoint_catalogue2`, the rest of the file in
:mod:`checkpoint_catalogue3`.

Upstream checks the op counts of the forward and backward graphs its partitioner
makes; here only what a user sees: outputs and gradients against eager (the
partition is conveyor's). Names are the upstream tests' without ``test_``; a
program is registered with :func:`fn` (a function) or :func:`program` (a builder
returning a module); :data:`REENTRANT` names the programs that checkpoint with
``use_reentrant=True`` (eager refuses ``torch.autograd.grad`` through them).
Run by ``test_checkpoint_programs.py``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from dynamo_repro_programs import Make, Program, randn
from torch import nn
from torch.utils.checkpoint import checkpoint

PROGRAMS: dict[str, Program] = {}
#: programs whose checkpoints are reentrant
REENTRANT: set[str] = set()


def program(name: str, make: Make, reentrant: bool = False) -> Callable[[Callable[[], Any]], Callable[[], Any]]:
    """Register ``build`` (returning what to compile) under ``name``."""

    def register(build: Callable[[], Any]) -> Callable[[], Any]:
        assert name not in PROGRAMS, name
        PROGRAMS[name] = Program(name, build, make)
        if reentrant:
            REENTRANT.add(name)
        return build

    return register


def fn(name: str, make: Make, reentrant: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register the function ``f`` itself under ``name``."""

    def register(f: Callable[..., Any]) -> Callable[..., Any]:
        program(name, make, reentrant)(lambda: f)
        return f

    return register


def _sig_mm(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(torch.matmul(x, y))


@fn("tags_function", randn((4, 4), (4, 4)), reentrant=True)
def _tags_function(x, y):
    return checkpoint(_sig_mm, torch.sin(x), y, use_reentrant=True)


@fn("tags_function_non_reentrant", randn((4, 4), (4, 4)))
def _tags_function_nr(x, y):
    return checkpoint(_sig_mm, torch.sin(x), y, use_reentrant=False)


def _cos_mm3_cos(x: torch.Tensor) -> torch.Tensor:
    x = x.cos()
    for _ in range(3):
        x = torch.mm(x, x)
    return x.cos()


@fn("tags_sequential_layers", randn((4, 4)), reentrant=True)
def _sequential(x):
    # upstream passes no use_reentrant: torch's default (reentrant, with a warning)
    x = checkpoint(_cos_mm3_cos, x, use_reentrant=True)
    return checkpoint(_cos_mm3_cos, x, use_reentrant=True)


@fn("tags_sequential_layers_non_reentrant", randn((4, 4)))
def _sequential_nr(x):
    x = checkpoint(_cos_mm3_cos, x, use_reentrant=False)
    return checkpoint(_cos_mm3_cos, x, use_reentrant=False)


@fn("tags_multiple_checkpoints", randn((4, 4), (4, 4)), reentrant=True)
def _multiple(x, y):
    z = checkpoint(_sig_mm, torch.sin(x), y, use_reentrant=True)
    return checkpoint(_sig_mm, torch.sin(z), y, use_reentrant=True)


class _LinearSigmoid(nn.Module):
    def __init__(self, act: Callable[[torch.Tensor], torch.Tensor] = torch.sigmoid) -> None:
        super().__init__()
        self.linear = nn.Linear(10, 10)
        self.act = act

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.act(self.linear(x))


class _CheckpointOf(nn.Module):
    """``checkpoint(mod, pre(x))``: a checkpointed submodule (its parameters are the
    program's)."""

    def __init__(self, mod: nn.Module, reentrant: bool, pre: Callable[[torch.Tensor], torch.Tensor] = torch.sin) -> None:
        super().__init__()
        self.mod = mod
        self.reentrant = reentrant
        self.pre = pre

    def forward(self, *xs: Any) -> Any:
        return checkpoint(self.mod, self.pre(xs[0]), *xs[1:], use_reentrant=self.reentrant)


@program("tags_module", randn((10, 10)), reentrant=True)
def _tags_module():
    return _CheckpointOf(_LinearSigmoid(), reentrant=True)


@program("tags_module_non_reentrant", randn((10, 10)))
def _tags_module_nr():
    return _CheckpointOf(_LinearSigmoid(), reentrant=False)


@program("tags_decomps", randn((10, 10)), reentrant=True)
def _tags_decomps():
    return _CheckpointOf(_LinearSigmoid(nn.functional.gelu), reentrant=True)


def _rand_gate(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(torch.rand_like(x) * y) * x


@fn("tags_recomputed_rand", randn((4, 4), (4, 4)), reentrant=True)
def _recomputed_rand(x, y):
    x = checkpoint(_rand_gate, torch.sin(x), y, use_reentrant=True)
    return checkpoint(_rand_gate, torch.sin(x), y, use_reentrant=True)


@fn("tags_recomputed_rand_non_reentrant", randn((4, 4), (4, 4)))
def _recomputed_rand_nr(x, y):
    x = checkpoint(_rand_gate, torch.sin(x), y, use_reentrant=False)
    return checkpoint(_rand_gate, torch.sin(x), y, use_reentrant=False)


def _mm2(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.mm(torch.mm(x, y), y)


@fn("tags_rand", randn((4, 4), (4, 4)), reentrant=True)
def _tags_rand(x, y):
    return torch.sin(checkpoint(_mm2, torch.sin(x), y, use_reentrant=True))


class _LinearDropout(nn.Module):
    def __init__(self, p: float = 0.2) -> None:
        super().__init__()
        self.linear = nn.Linear(10, 10)
        self.dropout = nn.Dropout(p)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.dropout(self.linear(x))


@program("tags_dropout", randn((10, 10)), reentrant=True)
def _tags_dropout():
    return _CheckpointOf(_LinearDropout(), reentrant=True, pre=lambda x: x)


@program("tags_dropout_non_reentrant", randn((10, 10)))
def _tags_dropout_nr():
    return _CheckpointOf(_LinearDropout(), reentrant=False, pre=lambda x: x)


def _graph_breaking(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    torch._dynamo.graph_break()
    a = torch.sigmoid(torch.matmul(x, y))
    torch._dynamo.graph_break()
    return torch.cos(a)


@fn("fallback", randn((4, 4), (4, 4)))
def _fallback(x, y):
    return torch.cos(checkpoint(_graph_breaking, torch.sin(x), y, use_reentrant=False))


@fn("fallback_reentrant", randn((4, 4), (4, 4)), reentrant=True)
def _fallback_r(x, y):
    return torch.cos(checkpoint(_graph_breaking, torch.sin(x), y, use_reentrant=True))


def _mm_kw(x: torch.Tensor, y: torch.Tensor, z: torch.Tensor | None = None) -> torch.Tensor:
    a = torch.matmul(x, y)
    return a if z is None else torch.matmul(a, z)


@fn("kwargs", randn((4, 4), (4, 4), (4, 4)))
def _kwargs(x, y, z):
    return torch.cos(checkpoint(_mm_kw, x, y, use_reentrant=False, z=z))


@fn("kwargs_none", randn((4, 4), (4, 4)))
def _kwargs_none(x, y):
    return torch.cos(checkpoint(_mm_kw, x, y, use_reentrant=False, z=None))


def _mm_dropout(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return torch.matmul(x, nn.functional.dropout(y, 0.5))


@fn("symints_location", randn((4, 4), (4, 4)), reentrant=True)
def _symints(x, y):
    return checkpoint(_mm_dropout, x, y, use_reentrant=True)


@fn("symints_location_non_reentrant", randn((5, 5), (5, 5)))
def _symints_nr(x, y):
    return checkpoint(_mm_dropout, x, y, use_reentrant=False)


class _SinBreakCos(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = torch.sin(x)
        torch._dynamo.graph_break()
        return torch.cos(x)


@program("error_msg", randn((4, 4)), reentrant=True)
def _error_msg():
    # upstream: fullgraph=True refuses the graph break; here it splits the program
    return _CheckpointOf(_SinBreakCos(), reentrant=True, pre=lambda x: x)


class _ListInputs(nn.Module):
    def forward(self, x: torch.Tensor, ys: list[torch.Tensor]) -> Any:
        torch.sin(x)
        return (x, [torch.cos(ys[0]), torch.cos(ys[1])])


@fn("list_inputs", lambda: [torch.randn(4, 4), [torch.randn(4, 4), torch.randn(4, 4)]], reentrant=True)
def _list_inputs(x, ys):
    return checkpoint(_ListInputs(), x, ys, use_reentrant=True)


@fn("list_inputs_non_reentrant", lambda: [torch.randn(4, 4), [torch.randn(4, 4), torch.randn(4, 4)]])
def _list_inputs_nr(x, ys):
    return checkpoint(_ListInputs(), x, ys, use_reentrant=False)


def _dot_prod_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    scores = torch.matmul(q, k.transpose(-2, -1)).mul(1.0 / k.shape[-1] ** 0.5)
    return scores.softmax(dim=-1).matmul(v)


@fn("pattern_matcher", randn((2, 2, 8, 16), (2, 2, 8, 16), (2, 2, 8, 16)), reentrant=True)
def _pattern_matcher(q, k, v):
    return checkpoint(_dot_prod_attention, q.sin(), k, v, use_reentrant=True)


def _sin_twice(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = torch.sin(x)
    return y, y


@fn("return_same_element_twice", randn((4, 4)), reentrant=True)
def _same_twice(x):
    return checkpoint(_sin_twice, x, use_reentrant=True)


@fn("return_same_element_twice_non_reentrant", randn((4, 4)))
def _same_twice_nr(x):
    return checkpoint(_sin_twice, x, use_reentrant=False)


def _record_function_region(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    with torch.profiler.record_function("matmul_region"):
        return torch.sigmoid(torch.matmul(x, y))


@fn("checkpoint_with_record_function", randn((4, 4), (4, 4)))
def _record_function(x, y):
    return checkpoint(_record_function_region, torch.sin(x), y, use_reentrant=False)


def _nested_inner(x: torch.Tensor) -> torch.Tensor:
    return torch.sigmoid(x @ x)


def _nested_outer(x: torch.Tensor) -> torch.Tensor:
    return checkpoint(_nested_inner, x.cos(), use_reentrant=False) * 2


@fn("nested_checkpoints", randn((4, 4)))
def _nested(x):
    # not upstream's: a checkpoint inside a checkpointed function
    return checkpoint(_nested_outer, x.sin(), use_reentrant=False).sum(0)


def _tuple_out(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]:
    a = x @ y
    return a.sin(), (a.cos(), y * 2)


@fn("tuple_outputs", randn((4, 4), (4, 4)))
def _tuple_outputs(x, y):
    # not upstream's: nested tuples out of a checkpoint
    a, (b, c) = checkpoint(_tuple_out, x, y, use_reentrant=False)
    return a + b, c
