"""Automatic dynamic shapes for ``conveyor.compile``.

Note [Automatic dynamic shapes]: as ``torch.compile`` does, the first call
of a program compiles with static sizes. When a later call misses the cache
but differs from an earlier one *only in sizes* (same everything else: dtype,
device, rank, ``requires_grad``, grad mode, structure, non-tensor values),
the sizes that changed become symbols: capture runs on fake tensors from a
``ShapeEnv`` whose dimensions that changed are ``DYNAMIC`` (the others stay
static), and the pipeline compiles once for all sizes. Whatever the trace and
the stages assumed about the symbols (``s0 > 1``, ``s1 == s0 + 1``, a size
specialized to 1) is a guard of that program; :class:`Guards` checks it on
every call that uses it, and a call that fails the guards compiles again
(with the dimensions that changed so far symbolic). A growing sequence length
(decoding token by token) compiles once symbolically, not once per token.

The configuration key ``dynamic`` chooses: ``None`` (this automatic mode),
``True`` (every dimension symbolic from the first call), ``False`` (every size
specialized, as before). Distinct inputs that share storage with one another
compile static: fake views of one base do not take independent symbolic
sizes (the same tensor passed twice, such as tied weights, is fine).
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import (
    SYMPY_INTERP,
    DimDynamic,
    ShapeEnv,
    StatelessSymbolicContext,
)

from conveyor.analysis.signature import CallSignature
from conveyor.runtime import cache

Sizes = tuple[tuple[int, ...] | None, ...]


def sizes(flat: Sequence[Any]) -> Sizes:
    """The size of each flat input (``None`` for non-tensors)."""
    return tuple(tuple(t.shape) if isinstance(t, torch.Tensor) else None for t in flat)


def shapeless_key(signature: CallSignature) -> Hashable:
    """The core key of a call with sizes, strides and offsets left out (rank kept)."""
    ranks = tuple(t.dim() if isinstance(t, torch.Tensor) else -1 for t in signature.inputs)
    return (cache.call_key(signature, shapes=False), ranks)


def changed_dims(first: Sizes, now: Sizes) -> frozenset[tuple[int, int]]:
    """``(input, dim)`` pairs whose size differs between two calls."""
    return frozenset(
        (i, d)
        for i, (a, b) in enumerate(zip(first, now, strict=True))
        if a is not None and b is not None
        for d, (x, y) in enumerate(zip(a, b, strict=True))
        if x != y
    )


def all_dims(flat: Sequence[Any]) -> frozenset[tuple[int, int]]:
    return frozenset((i, d) for i, t in enumerate(flat) if isinstance(t, torch.Tensor) for d in range(t.dim()))


def can_be_symbolic(signature: CallSignature) -> str | None:
    """Why a call's inputs must compile static (``None``: they need not)."""
    flat, groups = signature.inputs, signature.groups
    # the same tensor in several positions (tied weights) is one fake: fine
    if any(g not in (-1, i) and flat[g] is not flat[i] for i, g in enumerate(groups)):
        return "inputs share storage"
    if any(isinstance(t, torch.Tensor) and t.layout is not torch.strided for t in flat):
        return "an input is not strided"
    return None


def symbolic_fakes(flat: Sequence[Any], dims: frozenset[tuple[int, int]]) -> tuple[FakeTensorMode, list[Any]]:
    """A fake mode with a fresh ``ShapeEnv``, and fakes of ``flat`` whose
    ``dims`` are symbolic."""
    fake_mode = FakeTensorMode(shape_env=ShapeEnv())
    fakes: list[Any] = []
    for i, t in enumerate(flat):
        if not isinstance(t, torch.Tensor):
            fakes.append(t)
            continue
        context: StatelessSymbolicContext[Any, Any] = StatelessSymbolicContext(
            dynamic_sizes=[DimDynamic.DYNAMIC if (i, d) in dims else DimDynamic.STATIC for d in range(t.dim())],
        )
        fakes.append(fake_mode.from_tensor(t, symbolic_context=context))
    return fake_mode, fakes


@dataclass(frozen=True)
class Guards:
    """The size relations a symbolic program assumed, checked per call.

    :ivar source: the guard expression, for reading (``L['t0'].size()[0]``
        is the first flat input's first size).
    """

    source: str
    code: Any

    @staticmethod
    def of(fake_mode: FakeTensorMode, fakes: Sequence[Any]) -> Guards:
        """The guards of everything traced and compiled under ``fake_mode`` so
        far (call after the pipeline has compiled: stages add guards too)."""
        shape_env = fake_mode.shape_env
        assert shape_env is not None
        source = shape_env.produce_guards_expression(list(fakes), ignore_static=False) or "True"
        return Guards(source, compile(source, "<conveyor guards>", "eval"))

    def check(self, flat: Sequence[Any]) -> bool:
        """Whether a call's flat inputs satisfy the guards."""
        names = {f"t{i}": v for i, v in enumerate(flat)}
        return bool(eval(self.code, SYMPY_INTERP, {"L": names}))
