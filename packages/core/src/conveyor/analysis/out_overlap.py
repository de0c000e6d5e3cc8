"""An ``out=`` tensor that partially overlaps another argument of its op.

Note [out= overlapping an input]: eager refuses an ``out=`` call whose
output shares some but not all of its memory with an input, before it
computes anything (TensorIterator's ``assert_no_partial_overlap``: "some
elements of the input tensor and the written-to tensor refer to a single
memory location"); an output that *is* the input, element for element, is
allowed. A capture runs the op on fake tensors through torch's meta kernels
and references, which do not check: functionalized, the program computed a
result where eager raises (``torch.sub(out, inp, out=out.view(4, 6))``, the
sweep's M3). Whether eager raises, and for which ops, is its kernels'
business, so the capture does not decide it: a call whose ``out=`` tensor
partially overlaps another tensor argument (or might: symbolic layouts)
makes the program run eagerly, with a warning, and eager then does what it
does. Checked by the capture's per-op mode before the op runs (an ``out=``
that the op resizes has its new shape afterwards).
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.utils._pytree as pytree

from conveyor.analysis.overlap import Layout, overlaps
from conveyor.analysis.signature import storage_id
from conveyor.errors import EagerFallback


@functools.cache
def _out_names(op: torch._ops.OpOverload) -> tuple[str, ...]:
    """The keyword-only arguments ``op`` writes (its ``out=`` tensors)."""
    return tuple(
        a.name for a in op._schema.arguments if a.kwarg_only and a.alias_info is not None and a.alias_info.is_write
    )


def check_out_overlap(func: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
    """Raise :class:`EagerFallback` where an ``out=`` tensor of this call
    partially overlaps another of its tensor arguments (Note [out=
    overlapping an input])."""
    if not isinstance(func, torch._ops.OpOverload):
        return
    names = _out_names(func)
    if not names:
        return
    outs = [t for n in names for t in pytree.tree_leaves(kwargs.get(n)) if isinstance(t, torch.Tensor)]
    others = [
        t
        for t in pytree.tree_leaves((args, {k: v for k, v in kwargs.items() if k not in names}))
        if isinstance(t, torch.Tensor)
    ]
    for out in outs:
        for t in others:
            if _partial(out, t):
                raise EagerFallback(
                    f"its {func} call writes an out= tensor that shares some but not all of its memory with an "
                    "input, which eager refuses (Note [out= overlapping an input] in conveyor.analysis.out_overlap)"
                )


def _partial(out: torch.Tensor, t: torch.Tensor) -> bool:
    if out.layout is not torch.strided or t.layout is not torch.strided or storage_id(out) != storage_id(t):
        return False
    try:
        a, b = Layout.of(out), Layout.of(t)
    except (TypeError, ValueError, RuntimeError):  # a symbolic size, stride or offset
        return True
    return a != b and overlaps(a, b)
