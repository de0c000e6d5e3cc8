"""Programs conveyor runs eagerly instead, with a warning.

Note [Custom autograd functions]: a ``torch.autograd.Function`` carries its
own backward. Capture traces below autograd, where the Function's forward is
just aten ops run under ``no_grad``: the graph would lose the custom backward
(a straight-through estimator, a gradient reversal) and, with it, the
gradients eager computes. Rather than a wrong gradient, a program that applies
such a Function to tensors requiring grad runs eagerly, with a warning, for
that specialization (same grad mode, same ``requires_grad`` flags); the same
program in inference still compiles.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

import torch
import torch.utils._pytree as pytree
from torch.autograd.function import Function

from conveyor.errors import ConveyorError


class EagerFallback(ConveyorError):
    """Raised inside a capture that must not go on; the caller runs eagerly."""


def warn_eager(what: str, reason: str) -> None:
    warnings.warn(f"conveyor: running {what} eagerly: {reason}", stacklevel=3)


@contextlib.contextmanager
def watching_autograd_functions() -> Iterator[None]:
    """While tracing, a custom ``autograd.Function`` applied to tensors that
    require grad (grad mode on) raises :class:`EagerFallback`."""
    original = Function.__dict__["apply"]

    def apply(cls: type, *args: Any, **kwargs: Any) -> Any:
        if torch.is_grad_enabled() and any(
            t.requires_grad for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)
        ):
            raise EagerFallback(
                f"torch.autograd.Function {cls.__qualname__} needs its own backward, which a captured "
                "graph cannot keep (Note [Custom autograd functions])"
            )
        return original.__func__(cls, *args, **kwargs)

    Function.apply = classmethod(apply)  # type: ignore[method-assign,assignment]
    try:
        yield
    finally:
        Function.apply = original  # type: ignore[method-assign]


def has_autograd_function(gm: torch.fx.GraphModule) -> bool:
    """Dynamo's graph applies a custom ``autograd.Function`` (its
    ``autograd_function_apply`` higher-order op)."""
    hop = getattr(torch.ops.higher_order, "autograd_function_apply", None)
    return hop is not None and any(n.op == "call_function" and n.target is hop for n in gm.graph.nodes)
