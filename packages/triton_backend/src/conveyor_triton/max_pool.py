"""``max_pool2d_with_indices`` as two single-output ops a kernel can compute
(Note [Max pooling's two outputs]).

Note [Max pooling's two outputs]: ``max_pool2d_with_indices`` returns a
tuple (values, indices), and a fused kernel's values are single tensors (the
graph's ``getitem`` of a tuple is an aten view). The decomposition table
(``conveyor_triton.decompose``) therefore writes it as two ops of this
module's library, ``conveyor_triton::max_pool2d_values`` and
``conveyor_triton::max_pool2d_indices``, each a pooling window
(Note [Pooling windows] in ``conveyor_triton.pooling``); both read the same
input, so they share a kernel when both are needed (training), and an
inference graph that uses only the values drops the indices
(:func:`drop_unused_indices`). Their own implementations, for a graph in
which they stay aten calls, are eager's op's outputs; they are functional
ops with schemas, so the alias analysis sees them as it sees aten ops.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.fx

aten = torch.ops.aten


@torch.library.custom_op("conveyor_triton::max_pool2d_values", mutates_args=())
def max_pool2d_values(
    x: torch.Tensor, kernel_size: Sequence[int], stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int], ceil_mode: bool
) -> torch.Tensor:
    """The values of ``max_pool2d_with_indices``."""
    return aten.max_pool2d_with_indices(x, kernel_size, stride, padding, dilation, ceil_mode)[0]  # type: ignore[no-any-return]


@torch.library.custom_op("conveyor_triton::max_pool2d_indices", mutates_args=())
def max_pool2d_indices(
    x: torch.Tensor, kernel_size: Sequence[int], stride: Sequence[int], padding: Sequence[int], dilation: Sequence[int], ceil_mode: bool
) -> torch.Tensor:
    """The indices of ``max_pool2d_with_indices``."""
    return aten.max_pool2d_with_indices(x, kernel_size, stride, padding, dilation, ceil_mode)[1]  # type: ignore[no-any-return]


@max_pool2d_values.register_fake
def _values_fake(x, kernel_size, stride, padding, dilation, ceil_mode):  # type: ignore[no-untyped-def]
    return aten.max_pool2d_with_indices(x, kernel_size, stride, padding, dilation, ceil_mode)[0]


@max_pool2d_indices.register_fake
def _indices_fake(x, kernel_size, stride, padding, dilation, ceil_mode):  # type: ignore[no-untyped-def]
    return aten.max_pool2d_with_indices(x, kernel_size, stride, padding, dilation, ceil_mode)[1]


VALUES = torch.ops.conveyor_triton.max_pool2d_values.default
INDICES = torch.ops.conveyor_triton.max_pool2d_indices.default


def _list(value: int | Sequence[int]) -> list[int]:
    return [value] if isinstance(value, int) else list(value)


def decomposition(
    x: torch.Tensor,
    kernel_size: Sequence[int],
    stride: Sequence[int] = (),
    padding: int | Sequence[int] = 0,
    dilation: int | Sequence[int] = 1,
    ceil_mode: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """``max_pool2d_with_indices`` as its values and its indices (Note [Max pooling's two outputs])."""
    args = (x, _list(kernel_size), _list(stride), _list(padding), _list(dilation), ceil_mode)
    return VALUES(*args), INDICES(*args)


def drop_unused_indices(gm: torch.fx.GraphModule) -> None:
    """Erase the indices no node uses (their values' pooling needs none)."""
    for node in list(gm.graph.nodes):
        if node.op == "call_function" and node.target is INDICES and not node.users:
            gm.graph.erase_node(node)
    gm.recompile()
