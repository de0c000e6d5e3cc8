"""Pooling windows as values of a fused kernel instead of aten calls (Note
[Pooling windows]).

Note [Pooling windows]: an output element of ``avg_pool2d`` reads the
window of its input that its (row, column) coordinates say, at the same
leading coordinates; the kernel (``conveyor_triton.codegen_pool``) unrolls
the window (at most :data:`MAX_WINDOW` elements), each load masked to the
input (padding reads nothing), and computes the element as eager's CPU kernel
does: the sum in row-major window order, in float32 for 16-bit floats
(eager's accumulator), divided by the window's size, the padding counted or
not (``count_include_pad``) or ``divisor_override``; a window that holds no
input element gives 0.

The backwards are gathers too, one value per input-gradient element: the
windows that hold input element ``(h, w)`` are those whose window offset
``(i, j)`` puts it there, ``oh = (h + pad - i * dilation) / stride`` when
that divides, so the kernel unrolls the same window, reads the output
gradient at each such ``(oh, ow)`` and adds, in the order eager's CPU kernel
adds (output elements in row-major order): ``avg_pool2d_backward`` the output
gradient divided by that window's divisor, ``max_pool2d_with_indices_backward``
the output gradient where the saved index is this element's.

Each value joins its users' group like any pointwise value; its inputs are
read from memory (``ops.SHIFTED``).

``max_pool2d_with_indices`` is decomposed into its values and its indices
(Note [Max pooling's two outputs] in ``conveyor_triton.max_pool``), each
the window unrolled as eager's kernel walks it: an element replaces the
running maximum when it is greater or NaN, or is the window's first element
inside the input (so the index of an all ``-inf`` window is its first
element's, and the last NaN wins, as in eager).

What stays aten, and why:

* windows of more than :data:`MAX_WINDOW` elements (the unrolled kernel
  would be long), integer inputs (eager divides in the integer type) and
  inputs of another rank than 3 or 4.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from conveyor_triton import max_pool

aten = torch.ops.aten

#: the pooling ops written as kernels, by kind
POOLS: dict[Any, str] = {
    aten.avg_pool2d.default: "avg",
    max_pool.VALUES: "max",
    max_pool.INDICES: "max_index",
    aten.avg_pool2d_backward.default: "avg_backward",
    aten.max_pool2d_with_indices_backward.default: "max_backward",
}

#: the most elements of a window the kernel unrolls
MAX_WINDOW = 64


@dataclass(frozen=True)
class Pool:
    """One pooling op's window: sizes, strides, padding and dilation as
    (rows, columns).

    :ivar divisor: ``divisor_override``, or None.
    """

    kind: str
    kernel: tuple[int, int]
    stride: tuple[int, int]
    padding: tuple[int, int]
    count_include_pad: bool = True
    divisor: int | None = None
    dilation: tuple[int, int] = (1, 1)

    def __post_init__(self) -> None:
        if min(*self.kernel, *self.stride, *self.dilation) < 1 or min(self.padding) < 0:
            raise ValueError(f"not a pooling window: {self}")


def _pair(value: Any, default: tuple[int, int] | None = None) -> tuple[int, int]:
    if isinstance(value, int):
        return (value, value)
    items = tuple(value)
    if not items and default is not None:
        return default
    return (items[0], items[0]) if len(items) == 1 else (items[0], items[1])


def _arg(node: torch.fx.Node, position: int, name: str, default: Any) -> Any:
    return node.args[position] if len(node.args) > position else node.kwargs.get(name, default)


def pool(node: torch.fx.Node) -> Pool:
    """The :class:`Pool` of ``node``, an op of :data:`POOLS`."""
    kind = POOLS[node.target]
    at = 1 if kind.endswith("_backward") else 0  # a backward's arguments start with the output gradient
    kernel = _pair(_arg(node, at + 1, "kernel_size", ()))
    stride = _pair(_arg(node, at + 2, "stride", ()), kernel)
    padding = _pair(_arg(node, at + 3, "padding", 0))
    if kind.startswith("max"):
        return Pool(kind, kernel, stride, padding, dilation=_pair(_arg(node, at + 4, "dilation", 1)))
    return Pool(
        kind,
        kernel,
        stride,
        padding,
        bool(_arg(node, at + 5, "count_include_pad", True)),
        _arg(node, at + 6, "divisor_override", None),
    )


def fallback_reason(node: torch.fx.Node) -> str | None:
    """Why pooling ``node`` stays an aten call, or None (its operands are
    statically shaped tensors of supported dtypes: ``classify`` checked)."""
    x = node.args[0].meta["val"]  # type: ignore[union-attr]
    if not x.dtype.is_floating_point:
        return f"pooling of {x.dtype} (eager divides in the integer type; not written)"
    if x.dim() not in (3, 4):
        return f"pooling of a {x.dim()}-dim input"
    p = pool(node)
    if p.kernel[0] * p.kernel[1] > MAX_WINDOW:
        return f"a window of more than {MAX_WINDOW} elements (unrolled in the kernel)"
    if p.divisor == 0:
        return "divisor_override 0 (eager raises)"
    return None
