"""Tensor subclasses at the pipeline's boundary.

Note [Tensor subclasses]: a traceable wrapper subclass (``DTensor``, or any
tensor implementing ``__tensor_flatten__`` / ``__tensor_unflatten__``) is a
Python object around plain inner tensors. The stages see only the inner
tensors, as AOTAutograd's do:

- at trace time the program is traced as a function of the inner tensors:
  each subclass input is rebuilt from its traced inner tensors with
  ``__tensor_unflatten__`` and the program runs on it, so its
  ``__torch_dispatch__`` turns every op into aten ops (and functional
  collectives) on the inner tensors; each subclass output is flattened with
  ``__tensor_flatten__``. What is known about each subclass input and output
  (its type, flatten context, non-tensor inner attributes, outer size and
  stride) is recorded in a frozen :class:`Boundary`;
- at run time subclass inputs are flattened and subclass outputs rebuilt,
  through autograd functions whose backward does the reverse (gradients of
  the inner tensors become a gradient of the subclass, of the same kind as
  eager's), so gradients flow as in eager.

The flatten context is part of the compile-cache key (another ``DTensor``
placement compiles again). Outer sizes are recorded statically, so graphs
with subclass inputs are compiled with static shapes. A nested subclass, or
a tensor type with its own ``__torch_dispatch__`` that is not traceable, is
not handled: the program runs eagerly with a warning that names the type.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from conveyor.errors import CaptureError, ConveyorError
from conveyor.fallback import EagerFallback
from conveyor.stage import CompiledFn

_PLAIN = (torch.Tensor, torch.nn.Parameter, torch.nn.Buffer, FakeTensor)
BOUNDARY_META = "conveyor_subclass_boundary"


@dataclass(frozen=True)
class SubclassMeta:
    """How to rebuild one subclass tensor from its inner tensors.

    :ivar cls: the subclass.
    :ivar attrs: the inner tensor attributes, in the order of the flat graph.
    :ivar constants: the non-tensor inner attributes (a ``DeviceMesh``).
    :ivar context: the second result of ``__tensor_flatten__``.
    :ivar size: the outer size.
    :ivar stride: the outer stride.
    """

    cls: type
    attrs: tuple[str, ...]
    constants: tuple[tuple[str, Any], ...]
    context: Any
    size: tuple[int, ...]
    stride: tuple[int, ...]

    def __post_init__(self) -> None:
        if not self.attrs:
            raise ValueError(f"SubclassMeta: {self.cls.__qualname__} flattens to no inner tensor")

    def rebuild(self, inner: Sequence[torch.Tensor]) -> torch.Tensor:
        values: dict[str, Any] = dict(zip(self.attrs, inner, strict=True))
        values.update(self.constants)
        out: torch.Tensor = self.cls.__tensor_unflatten__(values, self.context, self.size, self.stride)  # type: ignore[attr-defined]
        return out


@dataclass(frozen=True)
class Boundary:
    """The subclass inputs and outputs of one traced program, by position
    (``None``: a plain value, one flat position)."""

    inputs: tuple[SubclassMeta | None, ...]
    outputs: tuple[SubclassMeta | None, ...]

    def inner_inputs(self, outer: Sequence[Any]) -> list[Any]:
        """The flat graph inputs for ``outer`` (run time: autograd-aware)."""
        inner: list[Any] = []
        for meta, x in zip(self.inputs, outer, strict=True):
            if meta is None:
                inner.append(x)
            elif torch.is_grad_enabled() and x.requires_grad:
                inner.extend(_Flatten.apply(meta, x))
            else:
                inner.extend(getattr(x, a).detach() for a in meta.attrs)
        return inner

    def outer_outputs(self, inner: Sequence[Any]) -> list[Any]:
        """The program's outputs from the flat graph outputs."""
        outs: list[Any] = []
        i = 0
        for meta in self.outputs:
            if meta is None:
                outs.append(inner[i])
                i += 1
                continue
            parts = inner[i : i + len(meta.attrs)]
            i += len(meta.attrs)
            if torch.is_grad_enabled() and any(p.requires_grad for p in parts):
                outs.append(_Unflatten.apply(meta, *parts))
            else:
                outs.append(meta.rebuild(parts))
        return outs

    def wrap(self, compiled: CompiledFn) -> CompiledFn:
        """The compiled program, called with and returning subclass tensors."""

        def run(args: list[Any]) -> Sequence[Any]:
            return self.outer_outputs(compiled(self.inner_inputs(args)))

        return run


def is_subclass(x: Any) -> bool:
    """A tensor of a traceable wrapper subclass (fakes are not)."""
    return isinstance(x, torch.Tensor) and type(x) not in _PLAIN and is_traceable_wrapper_subclass(x)


def is_fake(x: torch.Tensor) -> bool:
    """A subclass tensor whose inner tensors are all fake."""
    attrs, _ = x.__tensor_flatten__()  # type: ignore[attr-defined]
    inner = [getattr(x, a) for a in attrs]
    return all(isinstance(t, FakeTensor) for t in inner if isinstance(t, torch.Tensor))


def refuse_unsupported(flat: Sequence[Any]) -> None:
    """Raise :class:`EagerFallback` naming a tensor type the boundary cannot
    take apart (Note [Tensor subclasses])."""
    for x in flat:
        reason = _unsupported(x)
        if reason is not None:
            raise EagerFallback(reason)


def _unsupported(x: Any) -> str | None:
    if not isinstance(x, torch.Tensor) or type(x) in _PLAIN:
        return None
    name = type(x).__qualname__
    if is_traceable_wrapper_subclass(x):
        attrs, _ = x.__tensor_flatten__()  # type: ignore[attr-defined]
        if any(is_subclass(getattr(x, a)) for a in attrs):
            return f"the tensor subclass {name} holds tensor subclasses, which conveyor does not unwrap"
        return None
    if getattr(type(x), "__torch_dispatch__", None) is not torch.Tensor.__torch_dispatch__:
        return (
            f"the tensor subclass {name} has its own __torch_dispatch__ but no __tensor_flatten__/"
            "__tensor_unflatten__, so conveyor cannot trace through it"
        )
    return None


def boundary_key(flat: Sequence[Any]) -> Hashable:
    """The cache-key part for subclass inputs: their type and flatten
    context. A tensor type conveyor cannot trace through (fakes would lose
    it) is a :class:`CaptureError` here, before anything is traced."""
    parts = []
    for x in flat:
        if isinstance(x, torch.Tensor) and type(x) not in _PLAIN:
            reason = _unsupported(x)
            if reason is not None and not is_traceable_wrapper_subclass(x):
                raise CaptureError(f"capture: {reason}; run it eagerly, or implement that protocol")
            if is_subclass(x):
                parts.append(_meta_key(_meta(x)))
    return tuple(parts)


def _meta_key(meta: SubclassMeta) -> Hashable:
    parts = (meta.cls, meta.context, meta.constants)
    try:
        hash(parts)
    except TypeError:
        return (meta.cls, repr(meta.context), tuple((a, id(c)) for a, c in meta.constants))
    return parts


def _meta(x: torch.Tensor) -> SubclassMeta:
    attrs, context = x.__tensor_flatten__()  # type: ignore[attr-defined]
    tensors = tuple(a for a in attrs if isinstance(getattr(x, a), torch.Tensor))
    constants = tuple((a, getattr(x, a)) for a in attrs if a not in tensors)
    return SubclassMeta(type(x), tensors, constants, context, tuple(x.size()), tuple(x.stride()))


def desugar(
    fn: Callable[..., Sequence[Any]], fake_inputs: Sequence[Any]
) -> tuple[Callable[..., tuple[Any, ...]], list[Any], Callable[[], Boundary]] | None:
    """For a flat program whose fake inputs include subclass tensors: the
    program as a function of the inner tensors, its fake inner inputs, and a
    function giving the :class:`Boundary` once the program has been traced.
    ``None`` when no input is a subclass."""
    refuse_unsupported(fake_inputs)
    if not any(is_subclass(x) for x in fake_inputs):
        return None
    metas = tuple(_meta(x) if is_subclass(x) else None for x in fake_inputs)
    for meta in metas:
        if meta is not None and not all(isinstance(s, int) for s in (*meta.size, *meta.stride)):
            raise ConveyorError("subclasses: a tensor subclass input with symbolic sizes reached a static trace")
    inner_fakes: list[Any] = []
    for meta, x in zip(metas, fake_inputs, strict=True):
        if meta is None:
            inner_fakes.append(x)
            continue
        for a in meta.attrs:
            t = getattr(x, a)
            # the inner tensors stand for the subclass in the graph: they carry its requires_grad
            inner_fakes.append(t.detach().requires_grad_(x.requires_grad) if x.requires_grad else t)
    outputs: list[tuple[SubclassMeta | None, ...]] = []

    def inner_fn(*inner: Any) -> tuple[Any, ...]:
        outer: list[Any] = []
        i = 0
        for meta in metas:
            if meta is None:
                outer.append(inner[i])
                i += 1
            else:
                outer.append(meta.rebuild(inner[i : i + len(meta.attrs)]))
                i += len(meta.attrs)
        outs = fn(*outer)
        refuse_unsupported(outs)
        flat: list[Any] = []
        out_metas: list[SubclassMeta | None] = []
        for o in outs:
            if is_subclass(o):
                meta = _meta(o)
                out_metas.append(meta)
                flat.extend(getattr(o, a) for a in meta.attrs)
            else:
                out_metas.append(None)
                flat.append(o)
        outputs[:] = [tuple(out_metas)]
        return tuple(flat)

    def boundary() -> Boundary:
        return Boundary(metas, outputs[0])

    return inner_fn, inner_fakes, boundary


def stamp(graph: torch.fx.GraphModule, boundary: Boundary) -> torch.fx.GraphModule:
    """Record the boundary on the graph traced over the inner tensors.

    Note [Collectives on the gradient path]: a subclass that communicates
    (``DTensor`` redistributing) leaves functional collectives in the inner
    graph. Which collective the backward needs depends on the gradient's
    placements, which only the subclass's own autograd knows; the inner
    graph's aten derivatives cannot say. A graph with a collective whose
    inputs may require grad runs eagerly, with a warning, rather than train
    with wrong gradients; without grad it compiles."""
    if torch.is_grad_enabled():
        placeholders = [n for n in graph.graph.nodes if n.op == "placeholder"]
        if any(isinstance(v := n.meta.get("val"), torch.Tensor) and v.requires_grad for n in placeholders):
            for node in graph.graph.nodes:
                if node.op == "call_function" and getattr(node.target, "namespace", None) in _COLLECTIVES:
                    raise EagerFallback(
                        f"the tensor subclass program runs the collective {node.target} with inputs that "
                        "require grad, whose backward conveyor cannot derive (Note [Collectives on the gradient path])"
                    )
    graph.meta[BOUNDARY_META] = boundary
    return graph


_COLLECTIVES = ("_c10d_functional", "_c10d_functional_autograd", "c10d")


def lowered(
    graph: torch.fx.GraphModule, fakes: Sequence[Any]
) -> tuple[tuple[Any, ...], Callable[[CompiledFn], CompiledFn]]:
    """For a captured graph and the fake (outer) inputs it was captured for:
    the fake inputs of its placeholders and what wraps its compiled callable
    (the identity without subclasses)."""
    boundary: Boundary | None = graph.meta.get(BOUNDARY_META)
    if boundary is None:
        return tuple(fakes), _identity
    inner = tuple(n.meta["val"] for n in graph.graph.nodes if n.op == "placeholder")
    return inner, boundary.wrap


def _identity(compiled: CompiledFn) -> CompiledFn:
    return compiled


class _Flatten(torch.autograd.Function):
    """A subclass tensor to its inner tensors; backward rebuilds the
    gradient as a subclass tensor of the same kind."""

    @staticmethod
    def forward(ctx: Any, meta: SubclassMeta, x: torch.Tensor) -> tuple[torch.Tensor, ...]:  # type: ignore[override]
        ctx.meta = meta
        ctx.like = tuple(getattr(x, a).detach() for a in meta.attrs)
        return tuple(getattr(x, a).detach() for a in meta.attrs)  # new tensor objects, same storage

    @staticmethod
    def backward(ctx: Any, *grads: Any) -> Any:  # type: ignore[override]
        if all(g is None for g in grads):
            return None, None
        parts = [torch.zeros_like(t) if g is None else g for g, t in zip(grads, ctx.like, strict=True)]
        grad = ctx.meta.rebuild(parts)
        return None, grad.detach() if grad.requires_grad and not torch.is_grad_enabled() else grad


class _Unflatten(torch.autograd.Function):
    """Inner tensors to a subclass tensor; backward flattens the gradient,
    first coercing it to the forward's metadata where the subclass can
    (``DTensor`` redistributes a gradient with other placements)."""

    @staticmethod
    def forward(ctx: Any, meta: SubclassMeta, *inner: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        ctx.meta = meta
        return meta.rebuild([t.view_as(t) for t in inner])

    @staticmethod
    def backward(ctx: Any, grad: Any) -> Any:  # type: ignore[override]
        meta: SubclassMeta = ctx.meta
        if grad is None:
            return (None,) * (1 + len(meta.attrs))
        coerce = getattr(grad, "__coerce_same_metadata_as_tangent__", None)
        if coerce is not None:
            grad = coerce(meta.context) or grad
        if type(grad) is not meta.cls:
            raise ConveyorError(
                f"subclasses: the gradient of a {meta.cls.__qualname__} output is a {type(grad).__qualname__}, "
                "which conveyor cannot flatten into the compiled backward's inputs"
            )
        return (None, *(getattr(grad, a) for a in meta.attrs))
