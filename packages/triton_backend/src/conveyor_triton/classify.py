"""What each node of a decomposed graph is to the backend.

* ``pointwise``: one output element from the same element of each operand
  (after broadcasting); written as a Triton expression (``conveyor_triton.ops``),
  and ``cat``, which reads its element from one of its inputs (Note [Cat in a
  group] in ``conveyor_triton.codegen_cat``), reads at computed indexes
  (``index_select``, ``embedding``, ``gather``, ``x[i]``: Note [Index reads] in
  ``conveyor_triton.index_reads``) and pooling windows (``avg_pool2d``: Note
  [Pooling windows] in ``conveyor_triton.pooling``).
* ``reduction``: ``sum`` / ``amax`` / ``amin`` over some dimensions, and
  ``argmax`` / ``argmin`` over one dimension or the flattened tensor (Note
  [Arg reductions] in ``conveyor_triton.codegen_reduce``).
* ``scan``: ``cumsum`` along one dimension, a full value of a row group over
  that dimension (Note [Scans] in ``conveyor_triton.codegen_scan``).
* ``scatter``: ``scatter_add``, ``scatter``, ``index_put``, ...:
  a kernel of its own over the source's elements (Note [Scatters] in
  ``conveyor_triton.scatters``).
* ``view``: a view op. Inside a fusion group an order-keeping view
  (``view``, ``unsqueeze``, ``squeeze``, ...) is free; otherwise it runs as the
  aten view on the real tensor, which copies nothing, and kernels read the
  result through its sizes and strides (index arithmetic, no copy).
* ``fallback``: everything else (matmul, convolution, random ops, ops that
  write to a tensor, ops on dtypes or devices a kernel cannot take) runs as an
  aten call between kernels, with the reason in the report.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Literal

import torch
import torch.fx
from conveyor.stage_api import is_view, writes

from conveyor_triton.dtypes import SUPPORTED
from conveyor_triton.index_reads import INDEX_READS
from conveyor_triton.index_reads import fallback_reason as index_fallback
from conveyor_triton.ops import RULES, SHIFTED, Value
from conveyor_triton.pooling import POOLS
from conveyor_triton.pooling import fallback_reason as pool_fallback
from conveyor_triton.report import no_lowering
from conveyor_triton.scatters import SCATTERS
from conveyor_triton.scatters import fallback_reason as scatter_fallback

__all__ = ["ARG_REDUCTIONS", "ORDER_KEEPING_VIEWS", "REDUCTIONS", "SCANS", "NodeClass", "classify", "is_view", "static_tensor", "writes"]

aten = torch.ops.aten

Category = Literal["pointwise", "reduction", "scan", "scatter", "view", "fallback"]

#: scans along one dimension: a full value of a row group over that dimension
#: (Note [Scans] in ``conveyor_triton.codegen_scan``)
SCANS: dict[Any, str] = {aten.cumsum.default: "cumsum"}

REDUCTIONS: dict[Any, str] = {
    aten.sum.dim_IntList: "sum",
    aten.sum.default: "sum",
    aten.amax.default: "max",
    aten.amin.default: "min",
    aten.argmax.default: "argmax",
    aten.argmin.default: "argmin",
}

#: reductions whose result is the index of an element, not a value
ARG_REDUCTIONS = ("argmax", "argmin")

# views that keep the row-major order of elements: identities on a linear index
ORDER_KEEPING_VIEWS = {
    aten.view.default,
    aten._unsafe_view.default,
    aten.reshape.default,
    aten.unsqueeze.default,
    aten.squeeze.default,
    aten.squeeze.dim,
    aten.squeeze.dims,
    aten.alias.default,
    aten.detach.default,  # kept whole by the decomposition table (conveyor_triton.decompose)
}


@dataclass(frozen=True)
class NodeClass:
    """A node's category; for ``fallback``, why."""

    category: Category
    reason: str = ""
    writes: bool = False

    def __post_init__(self) -> None:
        if self.category == "fallback" and not self.reason:
            raise ValueError("a fallback needs a reason")


def static_tensor(value: Any) -> bool:
    """A tensor with concrete sizes and strides and a dtype a kernel takes."""
    return (
        isinstance(value, torch.Tensor)
        and value.layout is torch.strided
        and value.dtype in SUPPORTED
        and all(isinstance(s, int) for s in (*value.shape, *value.stride()))
    )


def _tensor_args(node: torch.fx.Node) -> list[Any]:
    return [a.meta.get("val") for a in node.all_input_nodes]


def classify(node: torch.fx.Node) -> NodeClass:
    """The category of a ``call_function`` node."""
    if writes(node):
        return NodeClass("fallback", "writes to an argument", writes=True)
    out = node.meta.get("val")
    if node.target in ORDER_KEEPING_VIEWS or is_view(node) or node.target is operator.getitem:
        return NodeClass("view")
    if node.target not in RULES and node.target not in REDUCTIONS and node.target not in SCANS and node.target not in SCATTERS:
        return NodeClass("fallback", no_lowering(node.target))
    if not static_tensor(out):
        return NodeClass("fallback", "output is not a statically shaped tensor of a supported dtype")
    assert isinstance(out, torch.Tensor)  # static_tensor checked it
    args = _tensor_args(node)
    if not all(static_tensor(a) for a in args):
        return NodeClass("fallback", "an operand is not a statically shaped tensor of a supported dtype")
    if any(a.device != out.device for a in args):
        return NodeClass("fallback", "operands on several devices")
    if out.device.type not in ("cpu", "cuda"):
        return NodeClass("fallback", f"device {out.device.type}")
    if node.target in REDUCTIONS:
        return _classify_reduction(node, out)
    if node.target in SCANS:
        return _classify_scan(node, out)
    if node.target in SCATTERS:  # Note [Scatters]: a step of its own
        reason = scatter_fallback(node)
        return NodeClass("scatter") if reason is None else NodeClass("fallback", reason)
    if node.target in INDEX_READS or node.target in POOLS:  # Note [Index reads], Note [Pooling windows]
        reason = index_fallback(node) if node.target in INDEX_READS else pool_fallback(node)
        return NodeClass("pointwise") if reason is None else NodeClass("fallback", reason)
    if node.target in SHIFTED:  # every input a tensor of a supported dtype, checked above
        return NodeClass("pointwise")
    return _classify_pointwise(node, out)


def _classify_reduction(node: torch.fx.Node, out: torch.Tensor) -> NodeClass:
    x = node.args[0].meta["val"]  # type: ignore[union-attr]
    kind = REDUCTIONS[node.target]
    if kind != "sum" and x.numel() == 0:
        return NodeClass("fallback", f"{kind} of an empty tensor (eager raises)")
    if kind != "sum" and out.dtype is torch.bool:
        return NodeClass("fallback", f"{kind} of bool")
    if kind in ARG_REDUCTIONS and x.dtype is torch.bool:
        return NodeClass("fallback", f"{kind} of bool (eager raises)")
    return NodeClass("reduction")


def _classify_scan(node: torch.fx.Node, out: torch.Tensor) -> NodeClass:
    x = node.args[0].meta["val"]  # type: ignore[union-attr]
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
    if x.dim() == 0 or not isinstance(dim, int):
        return NodeClass("fallback", "a scan of a 0-dim tensor")
    if x.numel() == 0:
        return NodeClass("fallback", "a scan of an empty tensor")
    if x.dtype.is_floating_point and not out.dtype.is_floating_point:
        return NodeClass("fallback", "a float to integer conversion (undefined in Triton for NaN and out-of-range values)")
    return NodeClass("scan")


def _classify_pointwise(node: torch.fx.Node, out: torch.Tensor) -> NodeClass:
    rule = RULES[node.target]
    operands: list[Value] = []
    for i in rule.reads:
        a = node.args[i] if i < len(node.args) else None
        if isinstance(a, torch.fx.Node):
            v = a.meta["val"]
            operands.append(Value(f"a{i}", v.dtype, ndim=v.dim()))
        elif isinstance(a, (bool, int, float)):
            operands.append(Value("", None, a))
        else:
            return NodeClass("fallback", f"argument {i} is {type(a).__name__}")
    try:
        expr = rule.emit(operands, node, out.dtype)
    except (ValueError, OverflowError) as exc:  # e.g. a NaN or infinite scalar for an integer tensor
        return NodeClass("fallback", f"a scalar argument has no value in {out.dtype}: {exc}")
    if expr is None:
        return NodeClass("fallback", f"{node.target} with these dtypes / arguments has no lowering")
    return NodeClass("pointwise")
