"""Custom autograd Functions captured as one node.

Note [Custom autograd functions]: a ``torch.autograd.Function`` carries its
own backward. Capture traces below autograd, where the Function's forward is
just aten ops: inlined, the graph would lose the custom backward (a
straight-through estimator, a gradient reversal) and with it eager's
gradients. So capture records each application of a Function to tensors
that require grad as one node, ``conveyor::apply_function``, a custom op:

- its kernel (and its fake kernel) runs the Function's forward, as
  ``apply`` under ``no_grad`` does: the values;
- its autograd formula runs the Function's backward;
- outputs the Function marks non-differentiable are marked so by the op's
  autograd too: they do not require grad, as in eager.

Every stage before the autograd stage keeps the node as it is (it is a
functional op); the autograd stage's joint trace records the node's forward
and its autograd formula's backward; backends call the nodes' kernels. An
application is one of two kinds:

- ``Applied``, a Function applied in the program (``conveyor.compile``),
  recorded as ``conveyor::apply_function_recorded``, whose kernel applies
  the Function with its own ``ctx`` once per call and whose backward is a
  second opaque op that runs the Function's ``backward`` on that ``ctx`` at
  run time, once per backward (Note [A Function's backward at run time] in
  ``conveyor.frontend.function_records``);
- ``AppliedBodies``, a Function dynamo traced (Note [Functions behind
  dynamo]), recorded as ``conveyor::apply_function``.

Before recording, the forward is run once on stand-ins: one that writes its
inputs, returns one of them (or a view of one), or returns something other
than tensors keeps the warned eager fallback, as does one its forward cannot
run on fake tensors. Tensors are the op's ``tensors`` argument and symbolic
ints (sizes under dynamic shapes) its ``ints``; other arguments are constants
of the application. A program with such a node is not stored in the disk
cache: the node names its application by an in-process index
(``is_apply_function`` names the three ops).

Note [Functions behind dynamo]: dynamo traces a Function's ``forward`` and
``backward`` into two graphs and applies them with the higher-order op
``torch.ops.higher_order.autograd_function_apply(fwd_body, bwd_body, *args,
non_differentiable_idx=..., saved_for_backward_idx=..., [dirty_idx=...])``:
``fwd_body(*args)`` returns ``(outputs, saved)``, ``bwd_body(*grads,
*saved)`` one gradient per argument (``None`` for sizes), both run under
``no_grad``. Before capture, :func:`with_functions_as_nodes` points each such
node of a copy of dynamo's graph at :func:`apply_bodies`, which records one
``conveyor::apply_function`` node (an ``AppliedBodies``) where a gradient can
flow, and traces ``fwd_body`` inline where none can. Its autograd formula runs
``fwd_body`` again for ``saved`` and then ``bwd_body`` on the gradients,
unused ones as zeros (eager's ``materialize_grads``): dynamo's own model,
which the joint trace records as aten ops. A Function that marks an input
dirty (``dirty_idx``: it writes it in place) or is given a symbolic float
keeps the warned eager fallback.

Note [Forward-body outputs no one reads]: dynamo may return more from
``fwd_body`` than the Function's outputs: torch 2.11 returns every tensor
intermediate of the forward too (its ``speculate_subgraph`` with
``allow_side_effects``), so that a tensor smuggled out by a side effect can be
read; ``bwd_body`` takes an unused gradient for each. The outer graph reads
the hop's result by ``getitem``: the node returns only the outputs it reads
(``AppliedBodies.kept``), the rest get zero gradients as unused outputs do.
Returned, such an intermediate could be the base of the Function's output
(``x.clone()[:3]`` returns the view and the clone), and a custom op's outputs
may not share memory: torch's check raised a RuntimeError at run time.

Outputs that share memory with each other (a Function returning a tensor and
a view of it) cannot be one node's on any torch: the probe finds them and the
application keeps the warned eager fallback (it raised at run time).
"""

from __future__ import annotations

import copy
import functools
import itertools
import operator
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch.fx.experimental.proxy_tensor import disable_proxy_modes_tracing

from conveyor.frontend import function_records
from conveyor.frontend.function_arguments import Arguments, Grads
from conveyor.frontend.function_records import Applied

#: the op of an ``AppliedBodies``, as graphs show it
OP_NAME = "conveyor::apply_function"


@dataclass(frozen=True)
class AppliedBodies:
    """One application of a Function that dynamo traced into a forward and a
    backward body (Note [Functions behind dynamo])."""

    fwd: torch.fx.GraphModule
    bwd: torch.fx.GraphModule
    arguments: Arguments
    single: bool
    non_differentiable: tuple[int, ...]
    #: the positions of the forward body's outputs the node returns, of ``width``
    #: (Note [Forward-body outputs no one reads]); ``None``: all of them
    kept: tuple[int, ...] | None = None
    width: int = 0

    def __post_init__(self) -> None:
        if self.kept is not None and (self.single or not all(0 <= i < self.width for i in self.kept)):
            raise ValueError(f"kept outputs {self.kept} are not positions of {self.width} forward-body outputs")

    def run_forward(self, tensors: Sequence[torch.Tensor], ints: Sequence[Any]) -> tuple[list[torch.Tensor], list[Any]]:
        """All of the forward body's outputs and the values saved for backward."""
        with torch.no_grad():  # the body switches grad mode itself; this restores the caller's
            outs, saved = self.fwd(*self.arguments.fill(tensors, ints))
        return _as_list(outs), _as_list(saved)

    def forward(self, tensors: Sequence[torch.Tensor], ints: Sequence[Any]) -> list[torch.Tensor]:
        """The node's outputs."""
        outs = self.run_forward(tensors, ints)[0]
        return outs if self.kept is None else [outs[i] for i in self.kept]

    @property
    def marked(self) -> tuple[int, ...]:
        """The node's outputs the Function marks non-differentiable."""
        if self.kept is None:
            return self.non_differentiable
        return tuple(self.kept.index(i) for i in self.non_differentiable if i in self.kept)

    def placed(self, outs: Sequence[torch.Tensor]) -> Any:
        """The node's outputs where the outer graph reads the hop's result (``None`` at the unread)."""
        if self.kept is None:
            return outs[0] if self.single else tuple(outs)
        found = dict(zip(self.kept, outs, strict=True))
        return tuple(found.get(i) for i in range(self.width))

    def gradients(
        self, tensors: Sequence[torch.Tensor], ints: Sequence[Any], requires: Sequence[bool], grads: Grads
    ) -> Grads:
        outs, saved = self.run_forward([t.detach() for t in tensors], ints)
        if self.kept is not None:  # the unread outputs' gradients are unused ones
            found_grads = dict(zip(self.kept, grads, strict=True))
            grads = [found_grads.get(i) for i in range(len(outs))]
        materialized = [torch.zeros_like(o) if g is None else g for o, g in zip(outs, grads, strict=True)]
        with torch.no_grad():
            found = _as_list(self.bwd(*materialized, *saved))
        return [found[pos] if rg else None for pos, rg in zip(self.arguments.tensor_positions, requires, strict=True)]


def _as_list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, (tuple, list)) else [value]


_APPLIED: dict[int, AppliedBodies] = {}
_keys = itertools.count()


@functools.cache
def _op() -> Any:
    """The custom op, defined on first use."""

    def forward(key: int, tensors: list[torch.Tensor], ints: list[int]) -> list[torch.Tensor]:
        return _APPLIED[key].forward(tensors, ints)

    # the same forward computes the values and, on fake tensors, their metadata
    apply_function = torch.library.custom_op(OP_NAME, forward, mutates_args=())
    apply_function.register_fake(forward)

    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        key, tensors, ints = inputs
        ctx.key, ctx.ints = key, ints
        ctx.requires = tuple(t.requires_grad for t in tensors)
        ctx.save_for_backward(*tensors)
        marked = _APPLIED[key].marked
        if marked:
            ctx.mark_non_differentiable(*(output[i] for i in marked))

    def backward(ctx: Any, grads: Grads) -> tuple[None, Grads, list[None] | None]:
        found = _APPLIED[ctx.key].gradients(ctx.saved_tensors, ctx.ints, ctx.requires, list(grads))
        # torch's tensor-list autograd matches the structure of the inputs: a list of
        # ints is one leaf (its gradient: None), an empty list an empty list
        return None, found, None if ctx.ints else []

    apply_function.register_autograd(backward, setup_context=setup_context)
    return torch.ops.conveyor.apply_function.default


def is_apply_function(target: Any) -> bool:
    """Whether an FX node's target is one of the ops of captured Functions
    (``conveyor::apply_function``, or an ``Applied``'s two: Note [A
    Function's backward at run time] in ``conveyor.frontend.function_records``)."""
    if function_records.is_function_op(target):
        return True
    return isinstance(target, torch._ops.OpOverload) and target.name() == OP_NAME


def probe(cls: type, args: tuple[Any, ...]) -> Applied | str:
    """The application of ``cls`` to ``args`` as one node, or why it cannot
    be one (Note [Custom autograd functions]): the Function is run once on
    stand-ins of the tensor arguments, outside the trace."""
    arguments = Arguments.of(args)
    if not arguments.tensor_positions:
        return "its tensors are not direct arguments of apply"
    if any(isinstance(leaf, torch.Tensor) for a in arguments.template for leaf in pytree.tree_leaves(a)):
        return "it takes tensors inside containers"

    def run(stand_ins: list[Any]) -> Any:
        with torch.enable_grad():
            return function_records._original_apply(cls, *stand_ins)

    snapshot = arguments.snapshot()  # Note [Graphs a Function rewrites] in conveyor.frontend.function_arguments
    found = _run_on_stand_ins(run, args, arguments)
    if isinstance(found, str):
        return found
    arguments = arguments.rewritten(snapshot)
    out, outs = found
    # floating outputs that do not require grad although their inputs do: marked non-differentiable
    marked = tuple(i for i, o in enumerate(outs) if (o.is_floating_point() or o.is_complex()) and not o.requires_grad)
    requires = tuple(t.requires_grad for t in arguments.tensors(args))
    return Applied(cls, arguments, isinstance(out, torch.Tensor), marked, requires)


def probe_bodies(
    fwd: torch.fx.GraphModule,
    bwd: torch.fx.GraphModule,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
    read: tuple[int, ...] | None = None,
) -> AppliedBodies | str:
    """dynamo's application of a Function (Note [Functions behind dynamo]) as
    one node, or why it cannot be one: the forward body is run once on
    stand-ins, outside the trace. ``read``: the positions of its outputs the
    outer graph reads (Note [Forward-body outputs no one reads]); ``None``: all."""
    if kwargs.get("dirty_idx"):
        return "it marks an input dirty (writes it in place)"
    if any(isinstance(a, (torch.SymFloat, torch.SymBool)) for a in args):
        return "it is given a symbolic float or bool"
    arguments = Arguments.of(args)
    width: list[int] = []

    def run(stand_ins: list[Any]) -> Any:
        with torch.no_grad():
            out = fwd(*stand_ins)[0]
        if read is None or not isinstance(out, (tuple, list)):
            return out
        width.append(len(out))
        return [out[i] for i in read]  # Note [Forward-body outputs no one reads]

    found = _run_on_stand_ins(run, args, arguments)
    if isinstance(found, str):
        return found
    out, _ = found
    non_differentiable = tuple(kwargs.get("non_differentiable_idx", ()))
    if not width or read == tuple(range(width[0])):
        return AppliedBodies(fwd, bwd, arguments, isinstance(out, torch.Tensor), non_differentiable)
    return AppliedBodies(fwd, bwd, arguments, False, non_differentiable, read, width[0])


def _run_on_stand_ins(
    run: Callable[[list[Any]], Any], args: Sequence[Any], arguments: Arguments
) -> tuple[Any, list[torch.Tensor]] | str:
    """``run``'s result on stand-ins of ``args`` and its outputs as a list, or
    why they cannot be one node's: it raised, it returned something other
    than tensors, wrote its inputs, returned one of them (or a view), or
    returned outputs that share memory."""
    # outside the trace and the capture's own function modes (it watches the user's code)
    with disable_proxy_modes_tracing(), torch._C.DisableTorchFunction():
        stand_ins = [_stand_in(a) if isinstance(a, torch.Tensor) else a for a in args]
        ins = arguments.tensors(stand_ins)
        versions = [t._version for t in ins]
        try:
            out = run(stand_ins)
        except Exception as exc:  # its own failure on fake tensors, named in the warning
            return f"its forward cannot run on fake tensors ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
        outs = [out] if isinstance(out, torch.Tensor) else list(out) if isinstance(out, (tuple, list)) else None
        if outs is None or not outs or not all(isinstance(o, torch.Tensor) for o in outs):
            return "it returns something other than tensors"
        if [t._version for t in ins] != versions:
            return "it writes to its inputs"
        storages = {t.untyped_storage()._cdata for t in ins if t.layout is torch.strided}
        if any(o.layout is torch.strided and o.untyped_storage()._cdata in storages for o in outs):
            return "it returns one of its inputs or a view of one"
        # a custom op's outputs may not alias each other (Note [Forward-body outputs no one reads])
        shared = [o.untyped_storage()._cdata for o in outs if o.layout is torch.strided]
        if len(set(shared)) != len(shared):
            return "it returns outputs that share memory (a tensor and a view of it)"
    return out, outs


def apply_as_node(applied: Applied | AppliedBodies, args: Sequence[Any]) -> Any:
    """Apply a probed application to ``args`` as one node: a
    ``conveyor::apply_function`` (dynamo's bodies) or a
    ``conveyor::apply_function_recorded`` (Note [A Function's backward at
    run time] in ``conveyor.frontend.function_records``)."""
    key = next(_keys)
    # the ops' own autograd is a custom op's (Note [Custom ops] in conveyor.frontend.fallback)
    tensors, ints = applied.arguments.tensors(args), applied.arguments.ints(args)
    if isinstance(applied, Applied):
        outs = function_records.apply_recorded(applied, key, tensors, ints)
        return outs[0] if applied.single else tuple(outs)
    _APPLIED[key] = applied
    return applied.placed(_op()(key, tensors, ints))


def with_functions_as_nodes(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``gm``, or where dynamo's graph applies Functions
    (``autograd_function_apply``), a copy that applies them through
    :func:`apply_bodies` (Note [Functions behind dynamo]). The copy shares
    ``gm``'s submodules and tensors."""
    hop = getattr(torch.ops.higher_order, "autograd_function_apply", None)
    if hop is None or not any(n.op == "call_function" and n.target is hop for n in gm.graph.nodes):
        return gm
    graph = copy.deepcopy(gm.graph)
    for node in graph.nodes:
        if node.op == "call_function" and node.target is hop:
            node.target = apply_bodies
            read = _read_positions(node)
            if read is not None:
                node.kwargs = {**node.kwargs, READ: read}
    return torch.fx.GraphModule(gm, graph)


#: the keyword of ``apply_bodies`` that names the outputs the outer graph reads
READ = "conveyor_read_outputs"


def _read_positions(node: torch.fx.Node) -> tuple[int, ...] | None:
    """The positions of ``node``'s result its users read, when each of them is a
    ``getitem`` by a constant position (Note [Forward-body outputs no one reads])."""
    found = set()
    for user in node.users:
        if not (user.op == "call_function" and user.target is operator.getitem and isinstance(user.args[1], int)):
            return None
        found.add(user.args[1])
    return tuple(sorted(found)) if found and min(found) >= 0 else None


def apply_bodies(fwd: torch.fx.GraphModule, bwd: torch.fx.GraphModule, *args: Any, **kwargs: Any) -> Any:
    """What ``autograd_function_apply(fwd, bwd, *args, **kwargs)`` records in
    a capture (Note [Functions behind dynamo]): one node where a gradient can
    flow, else the forward body, inline."""
    read = kwargs.pop(READ, None)
    if not (torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad for a in args)):
        with torch.no_grad():  # as the Function's forward runs; no output requires grad
            return fwd(*args)[0]
    applied = probe_bodies(fwd, bwd, args, kwargs, read)
    if isinstance(applied, str):
        from conveyor.errors import EagerFallback

        raise EagerFallback(
            f"a torch.autograd.Function that dynamo traced cannot be captured as one node with its own backward: "
            f"{applied} (Note [Functions behind dynamo] in conveyor.frontend.functions)"
        )
    return apply_as_node(applied, args)


def _stand_in(t: torch.Tensor) -> torch.Tensor:
    """A copy of ``t`` with its ``requires_grad``, not a leaf when it requires
    grad (an in-place op on it is then what the Function itself does)."""
    copy = t.detach().clone()
    return copy.requires_grad_().clone() if t.requires_grad else copy
