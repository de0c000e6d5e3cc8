"""Autograd state a program changes while it is traced.

Note [Autograd state changed by the program]: ``x.requires_grad_()``,
``x.requires_grad = ...``, ``x.detach_()`` and ``x.data = y`` change a
tensor's autograd state or swap its data behind autograd's back; a graph
traced below autograd records none of them. A program doing one of these runs
eagerly, with a warning, with one exception.

Note [Hooks and gradients a program reaches]: ``x.register_hook(h)``,
``x.register_post_accumulate_grad_hook(h)`` and ``x.retain_grad()`` attach
Python to autograd's graph, and ``p.grad`` (read or set) is the state that
graph accumulates into, as does ``loss.backward()``
(``torch.autograd.backward``): a trace on fake tensors would register the
hook on a fake that no call ever differentiates again, or read a gradient a
stand-in does not have (``conveyor.compile(opt.step)`` updated nothing:
every ``p.grad`` was ``None``), or set one no caller sees, or accumulate the
gradients of a ``backward()`` into stand-ins (a step calling
``loss.backward()`` left every ``.grad`` ``None``). Dynamo handles each
(hooks on inputs registered outside its graphs, pure hooks on intermediates
as a ``register_hook`` operator, gradients lifted to graph inputs, ``p.grad
= None`` replayed after the graph, ``backward()`` run between graphs), so a
standalone program that does one of them compiles through dynamo
(``DynamoSplits``: Note [Programs only dynamo can split]); a dynamo graph
that still holds one (a pure hook on an intermediate) runs eagerly, with a
warning.

Note [Tensors the program makes require grad]: ``out.requires_grad_()`` on a
tensor the program computed and that does not require grad makes it a new
leaf of autograd's graph. transformers' ``enable_input_require_grads`` hook
does this to the input embeddings, and wav2vec2's feature encoder sets
``hidden_states.requires_grad = True``, so that gradient checkpointing sees an
input requiring grad. No input's gradient can flow through such a leaf (it
did not require grad before), so it changes only which outputs require grad
and what its own ``.grad`` would hold. Both are what a graph cannot record;
neither is seen when every output that depends on the leaf also requires
grad through an input of the program, and the leaf itself is not an output.
So the trace lets the change happen, as eager does, and afterwards walks
each output's autograd graph (on fake tensors) for an input's
``AccumulateGrad``: an output that requires grad only through such a leaf,
or is one, makes the program run eagerly with a warning.

Note [Leaves the program makes]: ``torch.ones(2, requires_grad=True)`` in
a program makes a new leaf of autograd's graph on every call, which the
caller may get back and read the ``.grad`` of. A graph traced on fakes holds
the factory as a constant that requires nothing, so its outputs came back
not requiring grad. Dynamo makes such a leaf outside its graphs, so a
standalone program doing it compiles through dynamo.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

import torch
from torch.fx.experimental.proxy_tensor import get_proxy_mode, get_proxy_slot
from torch.overrides import TorchFunctionMode

from conveyor.analysis.grad_regions import recorded_with_grad
from conveyor.errors import DynamoSplits, EagerFallback
from conveyor.frontend import call_watch, fallback

_REFUSED_METHODS = {torch.Tensor.requires_grad_: "requires_grad_", torch.Tensor.detach_: "detach_"}
_REQUIRES_GRAD_SETTER = torch._C.TensorBase.__dict__["requires_grad"]
_REFUSED_SETTERS = {_REQUIRES_GRAD_SETTER: "requires_grad (set)", torch._C.TensorBase.__dict__["data"]: "data (set)"}
#: Note [Hooks and gradients a program reaches]
_AUTOGRAD_HOOKS = {
    torch.Tensor.register_hook: "registers a hook on a tensor (register_hook)",
    torch.Tensor.register_post_accumulate_grad_hook: "registers a hook on a tensor (register_post_accumulate_grad_hook)",
    torch.Tensor.retain_grad: "makes a tensor keep its gradient (retain_grad)",
    torch.Tensor.backward: "calls backward(), which accumulates gradients into the leaves' .grad",
    torch.autograd.backward: "calls torch.autograd.backward, which accumulates gradients into the leaves' .grad",
}
_GRAD = torch._C.TensorBase.__dict__["grad"]
# Note [In-place view ops on a view that requires grad]: ``v.unsqueeze_(1)``
# (``t_``, ``transpose_``, ``squeeze_``, ``as_strided_``...) on a view ``v``
# changes ``v``'s sizes and strides, but autograd keeps the view function it
# recorded when ``v`` was made (pytorch/pytorch issue 49825). Eager on CPU and
# CUDA regenerates a view by ``as_strided`` from its current layout and never
# reads that function; on fake tensors (a Python dispatch key) autograd
# replays it, so a later write through ``v`` (``v[0, 0, 1] = 0``) regenerated
# the old view and failed the trace (``select() cannot be applied to a 0-dim
# tensor``), or recorded a write at the wrong element where the shape came out
# the same. Such a program runs eagerly, with a warning. (Dynamo's own trace
# fails the same way before conveyor sees the graph, and AOTAutograd's
# gradient is silently wrong for ``transpose_``.)
_INPLACE_VIEW_METHODS = {
    getattr(torch.Tensor, name): name
    for name in ("t_", "transpose_", "swapdims_", "swapaxes_", "squeeze_", "unsqueeze_", "as_strided_")
}
# Note [Gradients of gradients in a program]: ``torch.autograd.grad(y, x,
# create_graph=True)`` in a program (a gradient penalty, a physics-informed
# loss) is traced below autograd: the engine's backward ops become ordinary
# nodes, and a saved output the backward reads (``exp``'s result) is unpacked
# through a ``detach``, which the stages take for a gradient cut. The
# gradient's value is right, but differentiating it again, inside the program
# or after it, silently missed every path through such saved values (h_sweep5
# B8: d/dx of d/dx exp(sin x) lost its cos x factor). Such a program runs
# eagerly, with a warning (torch.function mode sees the call with its
# arguments normalized to keywords). A gradient taken without
# ``create_graph`` is a value, and is captured.
_AUTOGRAD_GRAD = torch.autograd.grad
_DESCRIPTOR_CALLS = ("__get__", "__set__", "__delete__")


# Note [as_strided_ of a tensor that requires grad]: ``x.as_strided_((1,), (1,), 0)``
# on a tensor ``x`` (a view or not) that requires grad, while a view ``y`` of
# it is alive (another input, or ``x[0]`` made earlier): eager regenerates
# ``y``'s gradient function from ``x``'s new layout, so ``y``'s gradient flows
# back only into the elements ``x`` kept (the rest get zero); the functional
# graph gave every element its gradient (a silently different gradient), and a
# view made inside the program replayed its view function on the re-strided
# fake (a raw IndexError in the capture). Dynamo's entry and aot_eager match
# eager. A program doing it runs eagerly, with a warning; ``unsqueeze_``,
# ``t_`` and the other in-place view ops of a base keep its elements and compile.


def _requiring_grad(t: Any) -> bool:
    """``t`` is a tensor that requires grad, or a view of one, with grad mode on."""
    return isinstance(t, torch.Tensor) and torch.is_grad_enabled() and (t.requires_grad or _view_requiring_grad(t))


def _view_requiring_grad(t: Any) -> bool:
    """``t`` is a view whose base requires grad, with grad mode on."""
    if not isinstance(t, torch.Tensor) or not torch.is_grad_enabled() or not t._is_view():
        return False
    base = t._base
    return t.requires_grad or (base is not None and base.requires_grad)


def _made_by_program(t: torch.Tensor) -> bool:
    """``t`` is a value the traced program computed (an op's result in the
    current ``make_fx`` trace), not an input, parameter or constant."""
    mode = get_proxy_mode()
    if mode is None:
        return False
    slot = get_proxy_slot(t, mode.tracer, None)
    return slot is not None and slot.proxy.node.op == "call_function"


class AutogradStateWatcher(TorchFunctionMode):
    """Refuses the tensor methods of Note [Autograd state changed by the
    program], but lets a computed tensor be made to require grad and keeps
    it (Note [Tensors the program makes require grad])."""

    def __init__(self) -> None:
        super().__init__()
        self.sources: list[torch.Tensor] = []

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = kwargs or {}
        name = _REFUSED_METHODS.get(func)
        call = getattr(func, "__name__", None)
        hooked = _AUTOGRAD_HOOKS.get(func)
        if hooked is not None or (call in _DESCRIPTOR_CALLS and getattr(func, "__self__", None) is _GRAD):
            what = hooked or "reads or sets a tensor's .grad"
            raise DynamoSplits(f"it {what} (Note [Hooks and gradients a program reaches])")
        if func is _AUTOGRAD_GRAD and kwargs.get("create_graph"):
            raise EagerFallback(
                "it calls torch.autograd.grad with create_graph=True, whose gradient a graph records as values, "
                "not as something to differentiate again (Note [Gradients of gradients in a program])"
            )
        if kwargs.get("requires_grad") is True:  # Note [Leaves the program makes]
            raise DynamoSplits(
                f"it makes a new leaf that requires grad ({getattr(func, '__name__', func)}(..., requires_grad=True); "
                "Note [Leaves the program makes])"
            )
        inplace_view = _INPLACE_VIEW_METHODS.get(func)
        if inplace_view == "as_strided_" and _requiring_grad(args[0] if args else None):
            raise EagerFallback(
                "it re-strides a tensor that requires grad in place (Tensor.as_strided_), whose views' gradients "
                "eager routes through the new layout (Note [as_strided_ of a tensor that requires grad])"
            )
        if inplace_view is not None and _view_requiring_grad(args[0] if args else None):
            raise EagerFallback(
                f"it changes the layout of a view that requires grad in place (Tensor.{inplace_view}), which autograd "
                "records with a stale view function on fake tensors (Note [In-place view ops on a view that "
                "requires grad])"
            )
        setter = getattr(func, "__self__", None) if call == "__set__" else None
        if name is None and setter is not None:
            name = _REFUSED_SETTERS.get(setter)
        if name is None:
            custom = _custom_op(func)
            if custom is not None and torch.is_grad_enabled():
                with recorded_with_grad(custom):  # Note [Custom ops called with grad]
                    return call_watch.call_unwatched(func, *args, **kwargs)
            return call_watch.call_unwatched(func, *args, **kwargs)
        if func is torch.Tensor.requires_grad_ or setter is _REQUIRES_GRAD_SETTER:
            tensor, flag = args[0], args[1] if len(args) > 1 else kwargs.get("requires_grad", True)
            if isinstance(tensor, torch.Tensor) and bool(flag) == tensor.requires_grad:
                return func(*args, **kwargs)  # no change
            if isinstance(tensor, torch.Tensor) and flag and _made_by_program(tensor):
                self.sources.append(tensor)
                return func(*args, **kwargs)
        raise EagerFallback(
            f"it uses Tensor.{name}, which a captured graph cannot record (Note [Autograd state changed by the program])"
        )

    def refuse_outputs_needing_sources(self, outputs: Sequence[Any]) -> None:
        """Raise :class:`EagerFallback` when an output is one of the tensors
        the program made require grad, or requires grad only through them."""
        if not self.sources:
            return
        sources = {id(t) for t in self.sources}
        for out in outputs:
            if isinstance(out, torch.Tensor) and out.requires_grad and _only_through(out, sources):
                raise EagerFallback(
                    "it makes a tensor it computed require grad (requires_grad_), and an output requires grad "
                    "only through it, which a captured graph cannot record (Note [Tensors the program makes "
                    "require grad])"
                )


# Note [Custom ops called with grad]: a custom op's autograd (torch.library's
# ``register_autograd``, or the formula-less kernel torch gives a ``custom_op``)
# applies an ``autograd.Function`` whose forward runs the op under ``no_grad``,
# so the trace tags the op's node as run without grad, and a later stage would
# cut its gradient. ``Function.apply`` is wrapped during a capture and tags the
# node back (Note [Custom ops] in ``conveyor.frontend.fallback``), but torch
# binds the ``apply`` of an op taking or returning a ``Tensor[]`` when the op is
# defined (``supports_tensorlist``), past that wrapper: its outputs silently
# stopped requiring grad (h_sweep5 B1). So the watcher, which sees every op
# call the program makes, tags the node of a custom op the program calls with
# grad enabled as run with grad; only that op's own nodes: an op that
# decomposes keeps the grad modes of its parts.
def _custom_op(func: Any) -> str | None:
    """The ``"namespace::name"`` of the op ``func`` is when it is one outside
    torch's own namespaces (a custom op), else ``None``."""
    kind = type(func)
    if kind is torch._ops.OpOverload:
        name = func._schema.name
    elif kind is torch._ops.OpOverloadPacket:
        name = func._qualified_op_name
    else:
        return None
    return None if name.startswith(_TORCH_NAMESPACES) else name


#: the namespaces of torch's own ops, whose autograd records them under the caller's grad mode
_TORCH_NAMESPACES = ("aten::", "prims::")


def _autograd_nodes(outputs: Sequence[Any]) -> Iterator[Any]:
    """Each node of the outputs' autograd graph (on fake tensors), once."""
    stack: list[Any] = [o.grad_fn for o in outputs if isinstance(o, torch.Tensor) and o.grad_fn is not None]
    seen: set[Any] = set()
    while stack:
        fn = stack.pop()
        if fn is None or fn in seen:
            continue
        seen.add(fn)
        yield fn
        stack += [next_fn for next_fn, _ in fn.next_functions]


def _only_through(out: torch.Tensor, sources: set[int]) -> bool:
    """``out`` is a source, or its autograd graph reaches no leaf but the sources."""
    if out.grad_fn is None:
        return id(out) in sources
    for fn in _autograd_nodes([out]):
        variable = getattr(fn, "variable", None)  # AccumulateGrad
        if variable is not None and id(variable) not in sources:
            return False
    return True


def refuse_inlined_functions(outputs: Sequence[Any]) -> None:
    """Note [Functions applied past the capture]: capture records a custom
    ``autograd.Function`` as one node, keeping its own backward (Note
    [Custom autograd functions]), when the program calls ``Cls.apply``. A
    reference to ``apply`` taken before the capture began (``gelu =
    GeLUFunction.apply`` at import, a ``functools.partial``) bypasses that,
    and the trace inlines the Function's forward: its backward would be lost
    and gradients silently differ from eager's. The Function's backward node
    is still on the outputs' autograd graph (fake tensors carry one), so it
    is found there: such a program runs eagerly, with a warning naming the
    Function. (A custom op's own autograd is a Function too, recorded as the
    op: Note [Custom ops] in ``conveyor.frontend.fallback``. The subclass joint's
    trace applies Functions as they are, outside the capture's watch, and
    differentiates them above autograd: Note [Subclass programs in
    training].)"""
    if not fallback.watching():
        return
    for fn in _autograd_nodes(outputs):
        cls = getattr(type(fn), "_forward_cls", None)  # a Python Function's backward node
        if cls is not None and cls.__module__ != _CUSTOM_OP_AUTOGRAD:
            raise EagerFallback(
                f"it applies the torch.autograd.Function {cls.__qualname__} through a reference to its apply taken "
                f"before the compile, which capture cannot see: its own backward would be lost (Note [Functions "
                f"applied past the capture]); call {cls.__qualname__}.apply(...) in the program"
            )


#: where torch defines the Function behind a custom op's autograd
_CUSTOM_OP_AUTOGRAD = "torch._library.autograd"


def watching_user_code() -> AutogradStateWatcher:
    """Active while the user's program runs inside a capture trace."""
    return AutogradStateWatcher()


def sets_data(node: torch.fx.Node) -> bool:
    """Note [Data set behind dynamo]: for ``x.data = y`` dynamo's graph holds,
    on torch 2.11 to 2.13, a ``set_`` under ``no_grad`` and then a Python
    function of its own that lowers ``x``'s version counter by one, as eager's
    ``.data`` setter leaves it; from torch 2.14, ``aten.shallow_copy_data_``
    under ``no_grad`` (an op: conveyor's stages see it as a storage swap,
    which keeps ``x``'s value but not what autograd records for it). A trace
    records the version call as nothing, so the functional program's version
    counter (and what autograd checks against it, and which elements its
    gradient reaches) differed from eager's; replayed, ``shallow_copy_data_``
    sent ``x``'s gradient through the swapped-in value (a random-program
    fuzzer found both). Either graph runs eagerly, with a warning, as
    ``conveyor.compile`` runs a program that sets ``.data`` (Note [Autograd
    state changed by the program])."""
    if node.op != "call_function":
        return False
    if node.target in _SHALLOW_COPY_DATA:
        return True
    return getattr(node.target, "__name__", None) == "_lower_version_count_by_1"


def _shallow_copy_data() -> tuple[Any, ...]:
    """The op dynamo records for ``x.data = y`` from torch 2.14, as its graphs
    name it (the packet) and as a trace does (the overload); none where the
    installed torch has no such op."""
    packet = getattr(torch.ops.aten, "shallow_copy_data_", None)
    return () if packet is None else (packet, packet.default)


_SHALLOW_COPY_DATA = _shallow_copy_data()
