"""The pointwise aten ops the backend writes as Triton expressions.

Each rule says which positional arguments it reads as tensors (others are
Python scalars or options) and writes one expression from its operands. An op
that is not here, or whose arguments a rule declines (``None``), runs as an
aten call between kernels.

Formulas avoid libdevice (not available in Triton's interpreter): ``tanh`` is
``2 * sigmoid(2x) - 1``, ``log1p`` is ``log(1 + x)`` and so on, which are
accurate to float32's absolute tolerance.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx

from conveyor_triton.dtypes import cast, compute_dtype, fits, is_scalar, literal, wrap
from conveyor_triton.index_reads import INDEX_READS
from conveyor_triton.pooling import POOLS

aten = torch.ops.aten
prims = torch.ops.prims


@dataclass(frozen=True)
class Value:
    """An operand inside a kernel: an expression held in the compute dtype of
    ``dtype`` (Note [Compute dtype]), or a Python scalar (``dtype`` is None)."""

    expr: str
    dtype: torch.dtype | None
    scalar: Any = None
    ndim: int = 0

    def to(self, dtype: torch.dtype) -> str:
        """This operand as a value of ``dtype`` (a literal stays a literal)."""
        if self.dtype is None:
            if dtype is torch.bool:
                return literal(bool(self.scalar))
            if dtype.is_floating_point:
                return literal(float(self.scalar))
            return literal(wrap(int(self.scalar), dtype))
        return cast(self.expr, self.dtype, dtype)


Emit = Callable[[Sequence[Value], torch.fx.Node, torch.dtype], "str | None"]


@dataclass(frozen=True)
class Rule:
    """How one aten overload is written.

    :ivar reads: positions of the arguments read as tensors (or scalars in
        their place).
    :ivar emit: ``(operands, node, out_dtype) -> expression`` or None to decline.
    """

    reads: tuple[int, ...]
    emit: Emit


def _promoted(values: Sequence[Value]) -> torch.dtype:
    """The dtype PyTorch compares ``values`` in (0-dim tensors promote like
    scalars, as in eager), held as in Note [Compute dtype]."""
    reps = [v.scalar if v.dtype is None else torch.empty((1,) * min(v.ndim, 1), dtype=v.dtype) for v in values]
    if not isinstance(reps[0], torch.Tensor):
        reps.reverse()
    return compute_dtype(torch.result_type(reps[0], reps[1]))


def _alpha(node: torch.fx.Node, expr: str, dtype: torch.dtype) -> str:
    alpha = node.kwargs.get("alpha", 1)
    return expr if alpha == 1 else f"({expr} * {Value('', None, alpha).to(dtype)})"


def _binary(fmt: str) -> Emit:
    def emit(v: Sequence[Value], node: torch.fx.Node, out: torch.dtype) -> str | None:
        c = compute_dtype(out)
        return fmt.format(v[0].to(c), v[1].to(c))

    return emit


def _unary(fmt: str, floating: bool = False) -> Emit:
    def emit(v: Sequence[Value], node: torch.fx.Node, out: torch.dtype) -> str | None:
        if floating and not out.is_floating_point:
            return None
        return fmt.format(v[0].to(compute_dtype(out)))

    return emit


def _compare(op: str) -> Emit:
    def emit(v: Sequence[Value], node: torch.fx.Node, out: torch.dtype) -> str | None:
        c = _promoted(v)
        return f"({v[0].to(c)} {op} {v[1].to(c)})"

    return emit


def _logical(op: str) -> Emit:
    def emit(v: Sequence[Value], node: torch.fx.Node, out: torch.dtype) -> str | None:
        return cast(f"({v[0].to(torch.bool)} {op} {v[1].to(torch.bool)})", torch.bool, out)

    return emit


def _bitwise(op: str) -> Emit:
    def emit(v: Sequence[Value], node: torch.fx.Node, out: torch.dtype) -> str | None:
        if out.is_floating_point:
            return None
        return f"({v[0].to(out)} {op} {v[1].to(out)})"

    return emit


def _add(v: Sequence[Value], node: torch.fx.Node, out: torch.dtype) -> str | None:
    if out is torch.bool:
        # bool arithmetic saturates in eager (True + True is True); 1 + 1 in
        # one bit would be 0. The alpha of a bool add is a bool.
        a, b = v[0].to(torch.bool), v[1].to(torch.bool)
        return f"({a} | {b})" if node.kwargs.get("alpha", True) else a
    c = compute_dtype(out)
    return f"({v[0].to(c)} + {_alpha(node, v[1].to(c), c)})"


def _sub(v: Sequence[Value], node: torch.fx.Node, out: torch.dtype) -> str | None:
    if out is torch.bool:
        return None  # eager raises ("subtraction ... with two bool tensors"): aten raises it
    c = compute_dtype(out)
    return f"({v[0].to(c)} - {_alpha(node, v[1].to(c), c)})"


def _div(v: Sequence[Value], node: torch.fx.Node, out: torch.dtype) -> str | None:
    if not out.is_floating_point or node.kwargs.get("rounding_mode") is not None:
        return None
    c = compute_dtype(out)
    return f"({v[0].to(c)} / {v[1].to(c)})"


def _maximum(v: Sequence[Value], node: torch.fx.Node, out: torch.dtype) -> str | None:
    a, b = (x.to(compute_dtype(out)) for x in v)
    return f"tl.where(({a} > {b}) | ({a} != {a}), {a}, {b})"


def _minimum(v: Sequence[Value], node: torch.fx.Node, out: torch.dtype) -> str | None:
    a, b = (x.to(compute_dtype(out)) for x in v)
    return f"tl.where(({a} < {b}) | ({a} != {a}), {a}, {b})"


def _clamp_with(x: str, lo: Any, hi: Any, dtype: torch.dtype) -> str:
    # comparisons with NaN are false, so NaN passes through, as in eager;
    # bounds are converted to the tensor's dtype first, as in eager
    if lo is not None:
        low = Value("", None, lo).to(dtype)
        x = f"tl.where({x} < {low}, {low}, {x})"
    if hi is not None:
        high = Value("", None, hi).to(dtype)
        x = f"tl.where({x} > {high}, {high}, {x})"
    return x


def _scalar_arg(node: torch.fx.Node, i: int, name: str) -> Any:
    if len(node.args) > i:
        return node.args[i]
    return node.kwargs.get(name)


def _bounds_fit(out: torch.dtype, *bounds: Any) -> bool:
    """Eager's clamp converts its bounds with an overflow check (it raises on
    ``int8.clamp(-300)``): a bound ``out`` cannot hold runs as aten."""
    return out is not torch.bool and all(b is None or (is_scalar(b) and fits(b, out)) for b in bounds)


def _clamp(v: Sequence[Value], node: torch.fx.Node, out: torch.dtype) -> str | None:
    lo, hi = _scalar_arg(node, 1, "min"), _scalar_arg(node, 2, "max")
    if not _bounds_fit(out, lo, hi):
        return None
    c = compute_dtype(out)
    return _clamp_with(v[0].to(c), lo, hi, c)


def _clamp_min(v: Sequence[Value], node: torch.fx.Node, out: torch.dtype) -> str | None:
    c = compute_dtype(out)
    return _clamp_with(v[0].to(c), node.args[1], None, c) if _bounds_fit(out, node.args[1]) else None


def _clamp_max(v: Sequence[Value], node: torch.fx.Node, out: torch.dtype) -> str | None:
    c = compute_dtype(out)
    return _clamp_with(v[0].to(c), None, node.args[1], c) if _bounds_fit(out, node.args[1]) else None


def _relu(v: Sequence[Value], node: torch.fx.Node, out: torch.dtype) -> str | None:
    if out is torch.bool:
        return None
    x = v[0].to(compute_dtype(out))
    return f"tl.where({x} < 0, 0, {x})"


def _where(v: Sequence[Value], node: torch.fx.Node, out: torch.dtype) -> str | None:
    c = compute_dtype(out)
    return f"tl.where({v[0].to(torch.bool)}, {v[1].to(c)}, {v[2].to(c)})"


def _pow(v: Sequence[Value], node: torch.fx.Node, out: torch.dtype) -> str | None:
    e: Any = node.args[1]
    x = v[0].to(compute_dtype(out))
    if out.is_floating_point:
        table = {0.5: f"tl.sqrt({x})", -0.5: f"tl.math.rsqrt({x})", -1: f"(1.0 / {x})", -2: f"(1.0 / ({x} * {x}))"}
        if e in table:
            return table[e]
    if e == 0 and out is not torch.bool:
        return f"tl.full({x}.shape, 1, {x}.dtype)"
    if e in (1, 2, 3, 4) and out is not torch.bool:
        return "(" + " * ".join([x] * int(e)) + ")"
    return None


def _floor_ceil(fn: str) -> Emit:
    def emit(v: Sequence[Value], node: torch.fx.Node, out: torch.dtype) -> str | None:
        if out is torch.bool:
            return None
        x = v[0].to(compute_dtype(out))
        return f"tl.math.{fn}({x})" if out.is_floating_point else x

    return emit


def _trunc(v: Sequence[Value], node: torch.fx.Node, out: torch.dtype) -> str | None:
    if out is torch.bool:
        return None
    x = v[0].to(compute_dtype(out))
    return f"tl.where({x} < 0, tl.math.ceil({x}), tl.math.floor({x}))" if out.is_floating_point else x


def _neg(v: Sequence[Value], node: torch.fx.Node, out: torch.dtype) -> str | None:
    return None if out is torch.bool else f"(-{v[0].to(compute_dtype(out))})"


def _abs(v: Sequence[Value], node: torch.fx.Node, out: torch.dtype) -> str | None:
    return None if out is torch.bool else f"tl.abs({v[0].to(compute_dtype(out))})"


def _isnan(v: Sequence[Value], node: torch.fx.Node, out: torch.dtype) -> str | None:
    x = v[0]
    return f"({x.expr} != {x.expr})" if x.dtype is not None and x.dtype.is_floating_point else None


def _isinf(v: Sequence[Value], node: torch.fx.Node, out: torch.dtype) -> str | None:
    x = v[0]
    return f"(tl.abs({x.expr}) == float(\"inf\"))" if x.dtype is not None and x.dtype.is_floating_point else None


def _logical_not(v: Sequence[Value], node: torch.fx.Node, out: torch.dtype) -> str | None:
    return cast(f"({v[0].to(torch.bool)} == 0)", torch.bool, out)


def _bitwise_not(v: Sequence[Value], node: torch.fx.Node, out: torch.dtype) -> str | None:
    if out is torch.bool:
        return f"({v[0].to(torch.bool)} == 0)"
    if out is torch.uint8:
        # xor with the all-ones byte, not ``~``: Triton 3.6 and 3.8's interpreters
        # write ``~x`` as ``x ^ -1``, which numpy refuses (or wraps wrongly) for uint8
        return f"(({v[0].to(out)}) ^ 255).to(tl.uint8)"
    return None if out.is_floating_point else f"(~{v[0].to(out)})"


def _convert(v: Sequence[Value], node: torch.fx.Node, out: torch.dtype) -> str | None:
    x = v[0]
    if x.dtype is None or (x.dtype.is_floating_point and not out.is_floating_point and out is not torch.bool):
        return None  # float -> int conversion of NaN / out-of-range values is undefined in Triton
    return cast(x.expr, x.dtype, out)


def _to_copy(v: Sequence[Value], node: torch.fx.Node, out: torch.dtype) -> str | None:
    allowed = {"dtype", "layout", "device", "pin_memory", "memory_format"}
    if set(node.kwargs) - allowed or node.kwargs.get("pin_memory"):
        return None
    return _convert(v, node, out)


def _identity(v: Sequence[Value], node: torch.fx.Node, out: torch.dtype) -> str | None:
    return v[0].to(out) if v[0].dtype is out else None


def _copy(v: Sequence[Value], node: torch.fx.Node, out: torch.dtype) -> str | None:
    src = v[0]
    return None if src.dtype is None else cast(src.expr, src.dtype, out)


def _constant(position: int) -> Emit:
    def emit(v: Sequence[Value], node: torch.fx.Node, out: torch.dtype) -> str | None:
        value = node.args[position]
        if not is_scalar(value) or not fits(value, out):
            return None  # eager's conversion raises (``full_like(int8, 300)``): aten raises it
        return Value("", None, value).to(compute_dtype(out))

    return emit


def _written_by_codegen(v: Sequence[Value], node: torch.fx.Node, out: torch.dtype) -> str | None:
    """``cat`` reads each input at its own index, not at the output's: the code
    generator writes it (Note [Cat in a group] in ``conveyor_triton.codegen_cat``)."""
    return None


#: pointwise ops whose inputs are read at another index than the output's: an
#: input of one is never a member of its group (Note [Cat in a group]; reads at
#: computed indexes, Note [Index reads]; pooling windows, Note [Pooling windows])
SHIFTED = {aten.cat.default, *INDEX_READS, *POOLS}

RULES: dict[Any, Rule] = {
    aten.add.Tensor: Rule((0, 1), _add),
    aten.add.Scalar: Rule((0, 1), _add),
    aten.sub.Tensor: Rule((0, 1), _sub),
    aten.sub.Scalar: Rule((0, 1), _sub),
    aten.mul.Tensor: Rule((0, 1), _binary("({} * {})")),
    aten.mul.Scalar: Rule((0, 1), _binary("({} * {})")),
    aten.div.Tensor: Rule((0, 1), _div),
    aten.div.Scalar: Rule((0, 1), _div),
    prims.div.default: Rule((0, 1), _div),
    aten.neg.default: Rule((0,), _neg),
    aten.abs.default: Rule((0,), _abs),
    aten.reciprocal.default: Rule((0,), _unary("(1.0 / {})", floating=True)),
    aten.exp.default: Rule((0,), _unary("tl.exp({})", floating=True)),
    aten.exp2.default: Rule((0,), _unary("tl.exp2({})", floating=True)),
    aten.expm1.default: Rule((0,), _unary("(tl.exp({}) - 1.0)", floating=True)),
    aten.log.default: Rule((0,), _unary("tl.log({})", floating=True)),
    aten.log2.default: Rule((0,), _unary("tl.log2({})", floating=True)),
    aten.log10.default: Rule((0,), _unary("(tl.log({}) * 0.4342944819032518)", floating=True)),
    aten.log1p.default: Rule((0,), _unary("tl.log(1.0 + {})", floating=True)),
    aten.sqrt.default: Rule((0,), _unary("tl.sqrt({})", floating=True)),
    aten.rsqrt.default: Rule((0,), _unary("tl.math.rsqrt({})", floating=True)),
    aten.sin.default: Rule((0,), _unary("tl.sin({})", floating=True)),
    aten.cos.default: Rule((0,), _unary("tl.cos({})", floating=True)),
    aten.tanh.default: Rule((0,), _unary("(2.0 * tl.sigmoid(2.0 * {}) - 1.0)", floating=True)),
    aten.sigmoid.default: Rule((0,), _unary("tl.sigmoid({})", floating=True)),
    aten.erf.default: Rule((0,), _unary("tl.math.erf({})", floating=True)),
    aten.relu.default: Rule((0,), _relu),
    aten.floor.default: Rule((0,), _floor_ceil("floor")),
    aten.ceil.default: Rule((0,), _floor_ceil("ceil")),
    aten.trunc.default: Rule((0,), _trunc),
    aten.maximum.default: Rule((0, 1), _maximum),
    aten.minimum.default: Rule((0, 1), _minimum),
    aten.clamp.default: Rule((0,), _clamp),
    aten.clamp_min.default: Rule((0,), _clamp_min),
    aten.clamp_max.default: Rule((0,), _clamp_max),
    aten.where.self: Rule((0, 1, 2), _where),
    aten.pow.Tensor_Scalar: Rule((0,), _pow),
    aten.eq.Tensor: Rule((0, 1), _compare("==")),
    aten.eq.Scalar: Rule((0, 1), _compare("==")),
    aten.ne.Tensor: Rule((0, 1), _compare("!=")),
    aten.ne.Scalar: Rule((0, 1), _compare("!=")),
    aten.lt.Tensor: Rule((0, 1), _compare("<")),
    aten.lt.Scalar: Rule((0, 1), _compare("<")),
    aten.le.Tensor: Rule((0, 1), _compare("<=")),
    aten.le.Scalar: Rule((0, 1), _compare("<=")),
    aten.gt.Tensor: Rule((0, 1), _compare(">")),
    aten.gt.Scalar: Rule((0, 1), _compare(">")),
    aten.ge.Tensor: Rule((0, 1), _compare(">=")),
    aten.ge.Scalar: Rule((0, 1), _compare(">=")),
    aten.logical_not.default: Rule((0,), _logical_not),
    aten.logical_and.default: Rule((0, 1), _logical("&")),
    aten.logical_or.default: Rule((0, 1), _logical("|")),
    aten.logical_xor.default: Rule((0, 1), _logical("^")),
    aten.bitwise_not.default: Rule((0,), _bitwise_not),
    aten.bitwise_and.Tensor: Rule((0, 1), _bitwise("&")),
    aten.bitwise_or.Tensor: Rule((0, 1), _bitwise("|")),
    aten.bitwise_xor.Tensor: Rule((0, 1), _bitwise("^")),
    aten.isnan.default: Rule((0,), _isnan),
    aten.isinf.default: Rule((0,), _isinf),
    aten._to_copy.default: Rule((0,), _to_copy),
    prims.convert_element_type.default: Rule((0,), _convert),
    aten.clone.default: Rule((0,), _identity),
    aten.copy.default: Rule((1,), _copy),
    aten.fill.Scalar: Rule((), _constant(1)),
    aten.full.default: Rule((), _constant(1)),
    aten.full_like.default: Rule((), _constant(1)),
    aten.scalar_tensor.default: Rule((), _constant(0)),
    aten.cat.default: Rule((), _written_by_codegen),
    **{op: Rule((), _written_by_codegen) for op in (*INDEX_READS, *POOLS)},
}
