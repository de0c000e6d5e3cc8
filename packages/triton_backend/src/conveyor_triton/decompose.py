"""Decompose the received graph to the small op set the backend lowers.

PyTorch's core aten decompositions, plus the ones that turn normalization and
softmax ops (and their backwards) into pointwise ops and ``sum`` / ``amax``,
plus our own ``mean`` / ``var`` / ``var_mean`` / ``std`` in terms of ``sum``
(PyTorch's go through ``prims.var``, which has no single-kernel lowering here),
less the decompositions that compute something else than eager's kernel
(:data:`DIFFERS_FROM_EAGER`; GELU is fixed up at +inf instead, :func:`_gelu`),
and ``max_pool2d_with_indices`` as its values and its indices (Note [Max
pooling's two outputs] in ``conveyor_triton.max_pool``).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import Any

import conveyor
import torch
import torch.fx
from conveyor import Request
from torch._decomp import core_aten_decompositions, get_decompositions

from conveyor_triton import max_pool

aten = torch.ops.aten

_EXTRA = [
    aten.native_layer_norm,
    aten.native_layer_norm_backward,
    aten.gelu,
    aten.gelu_backward,
    aten._softmax,
    aten._log_softmax,
    aten._softmax_backward_data,
    aten._log_softmax_backward_data,
    aten.threshold_backward,
    aten.sigmoid_backward,
    aten.tanh_backward,
    aten.silu,
    aten.silu_backward,
    aten.hardtanh,
    aten.square,
    aten.addcmul,
    aten.addcdiv,
    aten.lerp,
    aten.zeros_like,
    aten.ones_like,
]


def _dims(x: torch.Tensor, dim: Any) -> list[int]:
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return list(range(x.dim()))
    dims = [dim] if isinstance(dim, int) else list(dim)
    return sorted({d % max(x.dim(), 1) for d in dims})


def _count(x: torch.Tensor, dims: Sequence[int]) -> int:
    return math.prod(x.shape[d] for d in dims) if x.dim() else 1


def _mean(x: torch.Tensor, dim: Any = None, keepdim: bool = False, *, dtype: torch.dtype | None = None) -> Any:
    out_dtype = dtype or x.dtype
    if not out_dtype.is_floating_point:
        return NotImplemented
    dims = _dims(x, dim)
    return aten.sum.dim_IntList(x, dims, keepdim, dtype=out_dtype) / _count(x, dims)


def _mean_default(x: torch.Tensor, *, dtype: torch.dtype | None = None) -> Any:
    return _mean(x, None, False, dtype=dtype)


def _var(x: torch.Tensor, dim: Any = None, *, correction: Any = None, keepdim: bool = False) -> Any:
    return _var_mean(x, dim, correction=correction, keepdim=keepdim)[0] if x.is_floating_point() else NotImplemented


def _var_mean(x: torch.Tensor, dim: Any = None, *, correction: Any = None, keepdim: bool = False) -> Any:
    if not x.is_floating_point():
        return NotImplemented
    dims = _dims(x, dim)
    n = _count(x, dims)
    mean = aten.sum.dim_IntList(x, dims, True) / n
    centered = x - mean
    c = 1 if correction is None else correction
    var = aten.sum.dim_IntList(centered * centered, dims, keepdim) / max(n - c, 0)
    return var, (mean if keepdim else aten.squeeze.dims(mean, dims))


def _std(x: torch.Tensor, dim: Any = None, *, correction: Any = None, keepdim: bool = False) -> Any:
    var = _var(x, dim, correction=correction, keepdim=keepdim)
    return NotImplemented if var is NotImplemented else aten.sqrt(var)


_TORCH_GELU = get_decompositions([aten.gelu])[aten.gelu.default]


def _gelu(x: torch.Tensor, approximate: str = "none") -> Any:
    """torch's GELU decomposition, and eager's value at +inf: on some CPUs
    eager's kernel for the erf form gives NaN there (its vectorized erf, which
    depends on the vector instructions the CPU has), the formula inf; on
    others, and on CUDA, eager gives inf, as the formula does. Which one this
    CPU's eager gives is probed (:func:`_cpu_gelu_nan_at_inf`)."""
    y = _TORCH_GELU(x, approximate=approximate)
    if approximate != "none" or x.device.type != "cpu" or not x.is_floating_point():
        return y
    if not _cpu_gelu_nan_at_inf(x.dtype):
        return y
    return torch.where(x == float("inf"), float("nan"), y)


@functools.cache
def _cpu_gelu_nan_at_inf(dtype: torch.dtype) -> bool:
    """Eager's exact GELU on this CPU gives NaN at +inf, for a tensor long
    enough for its vectorized loop and for a single element alike."""
    with torch.utils._python_dispatch._disable_current_modes():  # real tensors, recorded by no trace
        probes = [torch.full((n,), math.inf, dtype=dtype) for n in (1, 64)]
        return all(bool(torch.isnan(torch.nn.functional.gelu(p)).all()) for p in probes)


# kept whole: matmul-bound (they run as aten anyway), and the CPU flash
# attention decomposition returns a logsumexp of another shape than the kernel's;
# and detach: torch's decomposition records it as ``alias``, which the retrace
# refuses (Note [Gradient cuts below autograd] in conveyor.analysis.grad_regions),
# so a backward graph with a detach (layer norm's has one) failed to decompose
# and ran every op as an aten call. A detach is a view here either way.
_KEEP = [
    aten._scaled_dot_product_flash_attention_for_cpu,
    aten._scaled_dot_product_flash_attention_for_cpu_backward,
    aten.detach,
    # its decomposition is a zero fill and a mask as kernels around an index_put: three
    # launches, each over the whole (vocabulary, hidden) gradient, where its own scatter
    # kernel is one (Note [Scatters] in conveyor_triton.scatters)
    aten.embedding_dense_backward,
    # the same: a zero fill and kernels around an aten scatter, where the kernel is one
    aten.nll_loss_backward,
]


# kept whole: torch's decomposition computes something else than eager's kernel
# (found by the OpInfo pipeline sweep, tests/opinfo_pipeline_sweep.py)
DIFFERS_FROM_EAGER: dict[Any, str] = {
    aten.hardshrink.default: "differs from eager's kernel at non-finite inputs",
    aten.multi_margin_loss.default: "a NaN or infinite input gives a NaN loss where eager's kernel gives 0",
    aten.hardtanh_backward.default: "differs from eager's kernel at NaN inputs (also relu6's backward)",
    aten.hardswish_backward.default: "differs from eager's kernel at non-finite inputs",
    aten.smooth_l1_loss_backward.default: "differs from eager's kernel at non-finite inputs",
    aten.soft_margin_loss_backward.default: "differs from eager's kernel at non-finite inputs",
    aten.soft_margin_loss.default: "eager computes it op by op in a 16-bit dtype (exp overflows to inf in "
    "float16); the decomposition's kernel holds float32 (Note [Compute dtype])",
    aten.binary_cross_entropy.default: "does not raise, as eager's kernel does, on an input outside [0, 1]",
    aten.multilabel_margin_loss_forward.default: "wrong for a batch of more than one sample (the gathered "
    "targets, permuted to (C, N, 1), broadcast against the (N, C) input and mix samples)",
}


def table() -> dict[Any, Callable[..., Any]]:
    """The decomposition table the backend traces with."""
    decomps = {**core_aten_decompositions(), **get_decompositions(_EXTRA)}
    for packet in _KEEP:
        for overload in packet.overloads():
            decomps.pop(getattr(packet, overload), None)
    for op in DIFFERS_FROM_EAGER:
        decomps.pop(op, None)
    decomps.update(
        {
            aten.gelu.default: _gelu,
            aten.mean.dim: _mean,
            aten.mean.default: _mean_default,
            aten.var.correction: _var,
            aten.var_mean.correction: _var_mean,
            aten.std.correction: _std,
            aten.max_pool2d_with_indices.default: max_pool.decomposition,  # Note [Max pooling's two outputs]
        }
    )
    return decomps


def decompose(request: Request) -> tuple[torch.fx.GraphModule, str | None]:
    """The request's graph retraced with :func:`table`; on failure, the graph as
    received and the reason (its ops then run as aten calls where they must)."""
    graph = request.graph

    def flat(*args: Any) -> tuple[Any, ...]:
        return tuple(graph(*args))

    try:
        decomposed = conveyor.retrace(flat, request.inputs, request.fake_mode, decomposition_table=table())
    except Exception as exc:  # a decomposition that cannot trace: keep the ops as they are
        return graph, f"decomposition failed ({type(exc).__name__}: {exc}); ops kept as received"
    max_pool.drop_unused_indices(decomposed)
    before, after = _outputs(graph), _outputs(decomposed)
    if len(before) != len(after) or any(not _same_meta(a, b) for a, b in zip(before, after)):
        return graph, "decomposition changed an output's dtype or shape; ops kept as received"
    return decomposed, None


def _outputs(gm: torch.fx.GraphModule) -> list[Any]:
    output = next(n for n in gm.graph.nodes if n.op == "output")
    args = output.args[0] if isinstance(output.args[0], (list, tuple)) else [output.args[0]]
    return [a.meta.get("val") if isinstance(a, torch.fx.Node) else a for a in args]


def _same_meta(a: Any, b: Any) -> bool:
    if isinstance(a, torch.Tensor) != isinstance(b, torch.Tensor):
        return False
    return not isinstance(a, torch.Tensor) or (a.shape == b.shape and a.dtype == b.dtype)
