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
- at run time subclass inputs are flattened and subclass outputs rebuilt
  around the compiled graph. Without grad that is all; a program that
  trains gets its backward from the subclass's own autograd (Note [Subclass
  programs in training], ``conveyor.runtime.subclass_joint``), so gradients are
  those of eager.

The flatten context is part of the compile-cache key (another ``DTensor``
placement compiles again). Outer sizes are recorded statically, so graphs
with subclass inputs are compiled with static shapes. A nested subclass runs
eagerly with a warning that names the type; a tensor type with its own
``__torch_dispatch__`` but no flatten protocol is a clear error (a fake of
it would be a plain tensor, its behaviour lost).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
from torch._subclasses.fake_tensor import FakeTensor
from torch.utils._python_dispatch import is_traceable_wrapper_subclass

from conveyor.analysis.schema import writes
from conveyor.errors import CaptureError, ConveyorError, DynamoSplits, EagerFallback
from conveyor.protocol.stage import CompiledFn

_PLAIN = (torch.Tensor, torch.nn.Parameter, torch.nn.Buffer, FakeTensor)
_PLAIN_TYPES = frozenset(_PLAIN)


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
    #: for a program traced for training (Note [Subclass programs in training]):
    #: the program over subclass inputs, traced again with its backward, and
    #: which inputs require grad
    program: Callable[..., Sequence[Any]] | None = None
    requires_grad: tuple[bool, ...] = ()

    def inner_inputs(self, outer: Sequence[Any]) -> list[Any]:
        """The flat graph inputs for ``outer`` (run time, without grad)."""
        inner: list[Any] = []
        for meta, x in zip(self.inputs, outer, strict=True):
            if meta is None:
                inner.append(x)
            else:
                inner.extend(getattr(x, a).detach() for a in meta.attrs)
        return inner

    def outer_outputs(self, inner: Sequence[Any]) -> list[Any]:
        """The program's outputs from the flat graph outputs."""
        return rebuild(self.outputs, inner)

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


def refuse_torch_function_subclasses(flat: Sequence[Any]) -> None:
    """Note [Subclasses with only __torch_function__]: a tensor of a Python
    subclass without ``__torch_dispatch__`` or the flatten protocol
    (``x.as_subclass(Tagged)``, torchvision's ``tv_tensors``) is its data
    and its type: eager's ops return the subclass through its
    ``__torch_function__``, which a fake of it (a plain fake tensor) never
    calls, so a graph traced from it would return plain tensors. Dynamo
    traces ``__torch_function__`` and rewraps the outputs, so
    ``conveyor.compile`` compiles a program taking one through dynamo
    (:class:`DynamoSplits`)."""
    for x in flat:
        if (
            isinstance(x, torch.Tensor)
            and type(x) not in _PLAIN_TYPES
            and not is_traceable_wrapper_subclass(x)
            and getattr(type(x), "__torch_dispatch__", None) is torch.Tensor.__torch_dispatch__
        ):
            raise DynamoSplits(
                f"it takes a tensor of the subclass {type(x).__qualname__}, whose __torch_function__ a graph "
                "traced on fake tensors would drop (Note [Subclasses with only __torch_function__])"
            )


def boundary_key(flat: Sequence[Any]) -> Hashable:
    """The cache-key part for subclass inputs: their type and flatten
    context. A tensor type conveyor cannot trace through (fakes would lose
    it) is a :class:`CaptureError` here, before anything is traced."""
    parts = []
    for x in flat:
        if type(x) in _PLAIN_TYPES:
            continue
        if isinstance(x, torch.Tensor):
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
    fn: Callable[..., Sequence[Any]], fake_inputs: Sequence[Any], *, outputs_only: bool = False
) -> tuple[Callable[..., tuple[Any, ...]], list[Any], Callable[[], Boundary]] | None:
    """For a flat program whose fake inputs include subclass tensors (or,
    with ``outputs_only``, whose outputs do: Note [Subclasses the program
    makes]): the program as a function of the inner tensors, its fake inner
    inputs, and a function giving the :class:`Boundary` once the program has
    been traced. ``None`` when no input is a subclass."""
    refuse_unsupported(fake_inputs)
    if not outputs_only and not any(is_subclass(x) for x in fake_inputs):
        return None
    metas = tuple(_meta(x) if is_subclass(x) else None for x in fake_inputs)
    for meta in metas:
        if meta is not None and not all(isinstance(s, int) for s in (*meta.size, *meta.stride)):
            raise ConveyorError("subclasses: a tensor subclass input with symbolic sizes reached a static trace")
    requires = tuple(isinstance(x, torch.Tensor) and x.requires_grad for x in fake_inputs)
    train = torch.is_grad_enabled() and any(requires)
    inner_fakes: list[Any] = []
    for meta, x in zip(metas, fake_inputs, strict=True):
        if meta is None:
            # training: the forward graph computes values only (Note [Subclass programs in training])
            inner_fakes.append(x.detach() if train and isinstance(x, torch.Tensor) else x)
            continue
        inner_fakes.extend(getattr(x, a).detach() for a in meta.attrs)
    outputs: list[tuple[SubclassMeta | None, ...]] = []

    def inner_fn(*inner: Any) -> tuple[Any, ...]:
        outer = rebuild(metas, inner)
        with torch.no_grad() if train else contextlib.nullcontext():
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
        return Boundary(metas, outputs[0], fn, requires) if train else Boundary(metas, outputs[0])

    return inner_fn, inner_fakes, boundary


def returns_subclass(fn: Callable[..., Sequence[Any]], found: list[bool]) -> Callable[..., Sequence[Any]]:
    """``fn``, noting in ``found`` whether an output of its (last) run is a
    subclass tensor.

    Note [Subclasses the program makes]: a program over plain tensors may
    return a subclass tensor it builds (``TwoTensor(a * 2, b)``). Traced as
    it is, the graph's result would be the subclass built during the trace,
    around fake inner tensors, handed to the caller on every call. So the
    capture watches the outputs, and a program that returns a subclass is
    traced again as a function to the inner tensors (``desugar(...,
    outputs_only=True)``): its outputs are rebuilt around each call's real
    inner tensors, as for a subclass input."""

    def watched(*args: Any) -> Sequence[Any]:
        outs = fn(*args)
        found[:] = [any(is_subclass(o) for o in outs)]
        return outs

    return watched


def checked(graph: torch.fx.GraphModule, boundary: Boundary) -> Boundary:
    """``boundary``, for the graph traced over the inner tensors, if conveyor
    can compile the pair. A training program that writes to its inputs runs
    eagerly, with a warning (Note [Subclass programs in training])."""
    if boundary.program is not None and any(writes(n) for n in graph.graph.nodes if n.op == "call_function"):
        raise EagerFallback(
            "a tensor subclass program that writes to tensors is differentiated by recomputing it, "
            "which would write twice (Note [Subclass programs in training])"
        )
    return boundary


def meta_of(x: Any) -> SubclassMeta | None:
    """How to rebuild ``x`` from its inner tensors (``None``: not a subclass)."""
    return _meta(x) if is_subclass(x) else None


def flat_outer(values: Sequence[Any]) -> list[Any]:
    """Subclass tensors replaced by their inner tensors."""
    flat: list[Any] = []
    for x in values:
        meta = meta_of(x)
        flat.extend([x] if meta is None else [getattr(x, a) for a in meta.attrs])
    return flat


def outer_inputs(boundary: Boundary, inner: Sequence[Any]) -> list[Any]:
    """The program's inputs rebuilt from the inner ones (no autograd link)."""
    return rebuild(boundary.inputs, inner)


def rebuild(metas: Sequence[SubclassMeta | None], inner: Sequence[Any]) -> list[Any]:
    """Plain values and subclass tensors rebuilt from their flat inner
    tensors: one value per entry of ``metas`` (``None``: a plain value)."""
    outer: list[Any] = []
    i = 0
    for meta in metas:
        if meta is None:
            outer.append(inner[i])
            i += 1
        else:
            outer.append(meta.rebuild(inner[i : i + len(meta.attrs)]))
            i += len(meta.attrs)
    return outer