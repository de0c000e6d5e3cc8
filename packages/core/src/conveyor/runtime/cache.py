"""The compile-cache key: everything about a call that changes the program.

Per tensor input: type, dtype, device, layout, sizes, strides, storage offset,
requires_grad, leafness. Per call: grad mode, autocast, and which inputs share storage
(a storage-group number per tensor input, from the call's signature:
Note [The call signature]). Stages add what they specialize on
through ``StageSpec.cache_key``. Non-tensor arguments are keyed by value by
the caller (see ``conveyor.compiled``). A changed key is a recompile, never a
reused artifact.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensor

from conveyor.analysis.signature import CallSignature


def tensor_key(t: torch.Tensor, shapes: bool = True) -> Hashable:
    kind = torch.Tensor if isinstance(t, FakeTensor) else type(t)  # a fake stands for a real tensor
    if shapes:
        return (
            kind,
            t.dtype,
            t.device,
            t.layout,
            tuple(t.shape),
            t.stride() if t.layout is torch.strided else None,
            t.storage_offset() if t.layout is torch.strided else None,
            t.requires_grad,
            t.is_leaf,
        )
    return (kind, t.dtype, t.device, t.requires_grad, t.is_leaf)


def call_key(signature: CallSignature, shapes: bool = True) -> Hashable:
    """The core part of the key for one call's flat graph inputs (``signature``:
    the call's, Note [The call signature]; its storage groups are the key's last part).

    Note [A cheap call key]: this runs on every call, once per lifted
    parameter, so it is one comprehension over the inputs with the fewest
    attribute reads that still determine ``tensor_key``: a plain strided
    tensor (the common case) is keyed by its Python type, dtype, device,
    sizes, strides, storage offset, ``requires_grad`` and leafness, read
    fresh each call, so a swapped parameter, a ``requires_grad`` flip, an
    in-place resize or a ``.data =`` assignment changes the key. Fakes,
    sparse layouts and non-tensors take ``tensor_key``'s general path.
    """
    flat = signature.inputs
    if shapes:
        per_input = tuple(
            [
                (type(t), t.dtype, t.device, t.shape, t.stride(), t.storage_offset(), t.requires_grad, t.is_leaf)
                if type(t) in _PLAIN and t.layout is _STRIDED
                else tensor_key(t, shapes)
                if isinstance(t, torch.Tensor)
                else _scalar_kind(t)
                for t in flat
            ]
        )
    else:
        per_input = tuple(tensor_key(t, shapes) if isinstance(t, torch.Tensor) else _scalar_kind(t) for t in flat)
    return (torch.is_grad_enabled(), _autocast_key(), per_input, signature.groups)


#: tensor types keyed by the fast path of ``call_key`` (a fake is keyed as the real type it stands for)
_PLAIN = frozenset({torch.Tensor, torch.nn.Parameter, torch.nn.Buffer})
_STRIDED = torch.strided


def _autocast_key() -> tuple[Any, ...]:
    """Autocast changes which dtypes the traced ops compute in."""
    if not (_autocast_on("cpu") or _autocast_on("cuda")):
        return _NO_AUTOCAST  # the common case: two reads
    return tuple((torch.get_autocast_dtype(d) if _autocast_on(d) else None) for d in ("cpu", "cuda"))


_autocast_on = torch.is_autocast_enabled
_NO_AUTOCAST = (None, None)


def _scalar_kind(v: Any) -> Any:
    """A non-tensor graph input (dynamo passes sizes as ints, SymInts while tracing)."""
    if isinstance(v, (int, torch.SymInt)):
        return "int"
    if isinstance(v, (float, torch.SymFloat)):
        return "float"
    return type(v)
