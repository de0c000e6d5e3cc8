"""The run-time half: an ``autograd.Function`` around the compiled pair.

Its forward runs the compiled forward graph with autograd off, saves what the
graph returns for backward with ``save_for_backward`` (so a second backward
without ``retain_graph`` fails as in eager, and an in-place change of a saved
tensor is caught by its version counter), and marks the outputs that eager
would not differentiate. Its backward runs the compiled backward graph on the
saved values and the incoming gradients (made contiguous, as the graph was
traced with contiguous tangents).

Double backward (``create_graph=True`` and differentiating the gradients) is
not supported: the gradients carry an error that is raised when they are
differentiated, as ``once_differentiable`` does. Outputs that view an
intermediate can be changed in place, as in eager (Note [Views of
intermediates]).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
from conveyor import CompiledFn
from conveyor.stage_api import Deferred, reducible
from torch.fx._lazy_graph_module import _make_graph_module

from conveyor_autograd.layout import AutogradLayout
from conveyor_autograd.undefined import TangentSizes, UndefinedGrads

DOUBLE_BACKWARD = (
    "conveyor stage 'autograd': double backward through a compiled program is not supported "
    "(its backward graph is compiled without autograd); compute higher-order gradients eagerly"
)


class CompiledFunction(torch.autograd.Function):
    """``apply(layout, forward, backward, *args)`` (``backward``: a
    :class:`_Backward`): see the module docstring."""

    @staticmethod
    def forward(ctx: Any, layout: AutogradLayout, fwd: CompiledFn, bwd: _Backward, *args: Any) -> tuple[Any, ...]:
        outs = fwd(list(args))
        n, t = layout.num_outputs, layout.num_outputs + layout.num_saved_tensors
        ctx.save_for_backward(*outs[n:t])
        ctx.symbols = tuple(outs[t:]) if layout.num_saved_symbols else ()
        ctx.bwd = bwd
        user = outs[:n]
        if any(map(_is_view_tensor, user)):
            user = [_own_view(o, args) for o in user]
        if layout.non_differentiable:
            ctx.mark_non_differentiable(*(user[k] for k in layout.non_differentiable))
        if bwd.reads_tangents:  # Note [Outputs no loss reaches] in undefined.py
            ctx.set_materialize_grads(False)
            ctx.tangent_sizes = TangentSizes.note(user, layout.diff_outputs)
        return tuple(user)

    @staticmethod
    def backward(ctx: Any, *grad_outputs: Any) -> tuple[Any, ...]:
        plan: _Backward = ctx.bwd
        layout = plan.layout
        tensors = ctx.saved_tensors  # raises on a second backward without retain_graph
        grads_in = [g.contiguous() if isinstance(g, torch.Tensor) else g for g in grad_outputs]
        args = layout.backward_args(tensors, ctx.symbols, grads_in)
        made: tuple[bool, ...] = ()
        if plan.reads_tangents:
            args[layout.num_saved :], made = ctx.tangent_sizes.materialized(args[layout.num_saved :])
        if not torch.is_grad_enabled():  # the engine runs backward with grad mode off unless create_graph=True
            return plan.function_grads(plan.run(args, tensors, made))
        leaves = _leaf_inputs(ctx, layout.num_inputs)
        if any(node is not None and leaf is None for (node, _), leaf in zip(_edges(ctx, layout.num_inputs), leaves)):
            raise RuntimeError(f"{DOUBLE_BACKWARD_PAST_INPUTS} (Note [Gradients that cannot be differentiated])")
        with torch.no_grad():
            grads = plan.run(args, tensors, made)
        return function_grads(_poisoned(layout.input_grads(grads), leaves))


def _is_view_tensor(out: Any) -> bool:
    """A tensor that is a view (of an intermediate or of an input:
    :func:`_own_view` tells which)."""
    return isinstance(out, torch.Tensor) and out._is_view()


def _own_view(out: Any, args: Sequence[Any]) -> Any:
    """Note [Views of intermediates]: an ``autograd.Function`` output that is a
    view forbids in-place changes ("a function that returns multiple views").
    Eager allows them on a view of an intermediate, and so do we: such an
    output leaves as ``detach()``, the same memory and version counter (a
    later change of a saved base is still caught at backward) but not a view.
    Views of inputs stay views (autograd rebases them onto the input)."""
    if isinstance(out, torch.Tensor) and out._is_view() and not any(out._base is a for a in args):
        return out.detach()
    return out


def _edges(ctx: Any, n: int) -> Sequence[Any]:
    """This node's edges to its last ``n`` inputs."""
    return ctx.next_functions[-n:] if n else ()


def _leaf_inputs(ctx: Any, n: int) -> list[Any]:
    """The leaf tensors behind this node's last ``n`` inputs (``None`` for
    the others), read off the backward node's edges: no forward cost."""
    return [getattr(node, "variable", None) if node is not None else None for node, _ in _edges(ctx, n)]


# Note [Gradients that cannot be differentiated]: with ``create_graph=True``
# the gradients a compiled program gives its inputs carry an error node that
# raises when they are differentiated. The engine prunes a node that has no
# path to what ``torch.autograd.grad`` differentiates for, so an error node
# tied to its own input only was skipped when the gradient was differentiated
# for the weights: their gradient silently missed the gradient's part
# (h_sweep5 B5, a LayerNorm's input gradient taken inside a program behind
# dynamo, then differentiated for the LayerNorm's weight). So each gradient's
# error node is tied to every leaf input of the program, and where an input
# that gets a gradient is no leaf (its history lies before the program, which
# no tensor here can reach), the backward itself raises at once.
DOUBLE_BACKWARD_PAST_INPUTS = (
    "conveyor stage 'autograd': a gradient taken with create_graph=True through a compiled program whose inputs "
    "are computed by earlier operations cannot be differentiated again, and the program's backward graph is "
    "compiled without autograd; compute higher-order gradients eagerly"
)


def _poisoned(grads: Sequence[Any], leaves: Sequence[Any]) -> list[Any]:
    """Gradients that raise :data:`DOUBLE_BACKWARD` when differentiated.

    Each one is also tied to every leaf input of the program, so that
    ``torch.autograd.grad(grad, leaf)`` reaches the error for any of them
    instead of failing with "not used in the graph", or returning another
    path's gradient only (Note [Gradients that cannot be differentiated])."""
    out = list(grads)
    tied = tuple(leaf for leaf in leaves if isinstance(leaf, torch.Tensor))
    for i, g in enumerate(grads):
        if g is None:
            continue
        sources = (g.detach().requires_grad_(True), *tied)
        wrapped = torch._C._functions.DelayedError(DOUBLE_BACKWARD, len(sources))(*sources)
        out[i] = wrapped[0] if isinstance(wrapped, tuple) else wrapped
    return out


@dataclass(frozen=True)
class BackwardGraph:
    """Note [Inlined backward]: what torch's compiled autograd needs to copy
    one program's backward graph into its capture instead of calling the
    compiled backward opaquely (``conveyor_compiled_autograd`` reads it off
    ``backward_graph_of(ctx._forward_cls)``).

    :ivar layout: the program's calling conventions; the graph's placeholders
        are ``layout.backward_args(saved tensors, saved symbols, tangents)``.
    :ivar stored: the aten backward graph as the autograd stage produced it,
        before the backend compiled it (a copy: nothing downstream edits it),
        unpickled only when read (Note [Values loaded on demand] in
        ``conveyor.protocol.artifacts``): only compiled autograd reads it,
        and a program loaded from the disk cache usually never is.
    :ivar undefined: the plan of the outputs the backward may leave undefined
        (``UndefinedGrads.of`` the graph), made with it, so that a loaded
        program does not make the graph to find it.
    """

    layout: AutogradLayout
    stored: Deferred[torch.fx.GraphModule]
    undefined: UndefinedGrads | None

    @property
    def graph(self) -> torch.fx.GraphModule:
        """The backward graph (unpickled on the first read after a load)."""
        return self.stored.get()

    @staticmethod
    def of(layout: AutogradLayout, backward: torch.fx.GraphModule) -> BackwardGraph:
        """The marker of the backward graph ``backward`` (copied)."""
        n = sum(1 for node in backward.graph.nodes if node.op == "placeholder")
        want = layout.num_saved + len(layout.diff_outputs)
        if n != want:
            raise ValueError(f"BackwardGraph: {n} placeholders, the layout needs {want}")
        graph = _copy_graph(backward)
        return BackwardGraph(layout, Deferred(graph), UndefinedGrads.of(graph, layout))


def _copy_graph(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """A new graph with the same nodes (node meta copied shallowly)."""
    graph = torch.fx.Graph()
    out = graph.graph_copy(gm.graph, {})
    graph.output(out)
    return _make_graph_module(gm, graph)  # lazy in the stage (Note [Graphs nobody runs] in stage.py)


def program_function(layout: AutogradLayout, backward: torch.fx.GraphModule) -> type[CompiledFunction]:
    """A :class:`CompiledFunction` subclass for one compiled program, marked
    with its :class:`BackwardGraph` (Note [Inlined backward]).

    Compiled autograd keys a Python node by its class and by
    ``_compiled_autograd_key``: the saved symbols (SymInts at compile time,
    ints at run time) are part of that key, so the capture lifts them as
    sizes and a new batch size does not specialize the captured graph."""
    return _function_class(BackwardGraph.of(layout, backward))


def _function_class(marker: BackwardGraph) -> type[CompiledFunction]:
    return type(
        "CompiledFunction",
        (CompiledFunction,),
        {_MARKER: marker, "_compiled_autograd_key": staticmethod(_compiled_autograd_key), "__module__": __name__},
    )


_MARKER = "conveyor_backward"


def backward_graph_of(function: type) -> BackwardGraph | None:
    """The :class:`BackwardGraph` of a compiled program's Function class
    (``ctx._forward_cls`` of its backward node), or ``None`` for any other
    Function (Note [Inlined backward])."""
    marker = getattr(function, _MARKER, None)
    return marker if isinstance(marker, BackwardGraph) else None


#: ``CompiledFunction.apply(layout, forward, backward, *args)``: the leading arguments that get no gradient
_LEADING = 3


def function_grads(input_grads: Sequence[Any]) -> tuple[Any, ...]:
    """What ``CompiledFunction.backward`` returns for the program's input
    gradients: none for its leading non-tensor arguments, then each."""
    return (*(None,) * _LEADING, *input_grads)


def _compiled_autograd_key(ctx: Any) -> tuple[Any, ...]:
    return (ctx._autograd_function_id, *ctx.symbols)


@dataclass(frozen=True)
class _Backward:
    """What :meth:`CompiledFunction.backward` needs of one program, made once
    (Note [Run-time plan]).

    :ivar layout: the program's calling conventions.
    :ivar compiled: the compiled backward graph.
    :ivar gather: for each of ``apply``'s arguments, the position of its
        gradient among the backward graph's outputs (``len(grad_inputs)``:
        none, read from the ``None`` appended after them).
    :ivar undefined: the outputs a custom Function's backward or an
        unreached output may leave undefined (Note [Gradients a Function's
        backward leaves undefined], Note [Outputs no loss reaches], both in
        ``undefined.py``), or ``None``.
    :ivar reads_tangents: ``undefined`` reads which tangents were undefined:
        the forward turns the engine's materialization off.
    """

    layout: AutogradLayout
    compiled: CompiledFn
    gather: tuple[int, ...]
    undefined: UndefinedGrads | None = None
    reads_tangents: bool = False

    @staticmethod
    def of(layout: AutogradLayout, compiled: CompiledFn, undefined: UndefinedGrads | None = None) -> _Backward:
        none = len(layout.grad_inputs)
        where: dict[int, int] = {int(i): j for j, i in enumerate(layout.grad_inputs)}
        gather = tuple(where.get(i, none) for i in range(-_LEADING, layout.num_inputs))
        reads = undefined is not None and undefined.reads_tangents
        return _Backward(layout, compiled, gather, undefined, reads)

    def run(self, args: list[Any], saved: Sequence[Any], made: Sequence[bool] = ()) -> Sequence[Any]:
        """The backward graph's outputs (``None`` where a Function's backward
        or the undefined tangents, ``made`` zeros here, left them undefined)."""
        grads = self.compiled(args)
        return grads if self.undefined is None else self.undefined.apply(grads, saved, made)

    def function_grads(self, grads: Sequence[Any]) -> tuple[Any, ...]:
        """:func:`function_grads` of ``layout.input_grads(grads)``, by one
        ``map`` over the precomputed positions."""
        return tuple(map([*grads, None].__getitem__, self.gather))


# Note [Run-time plan]: what runs per call is decided when the program is
# wrapped: the backward's argument-to-gradient map (:class:`_Backward`), and
# ``apply`` without ``Function.apply``'s Python layer where torch allows it
# (:func:`_direct_apply`).
def _direct_apply(function: type[CompiledFunction]) -> Callable[..., Any] | None:
    """``function``'s C++ ``apply`` (what ``Function.apply`` calls after
    unwrapping dead functorch wrappers, when no functorch transform is
    active and the Function defines no ``setup_context``), or ``None`` where
    this torch lays ``Function.apply`` out otherwise (probed)."""
    base = getattr(torch._C, "_FunctionBase", None)
    defines_setup = getattr(torch.autograd.function, "_is_setup_context_defined", None)
    if (
        base is None
        or defines_setup is None
        or defines_setup(function.setup_context)
        or not hasattr(torch._C, "_are_functorch_transforms_active")
        or not hasattr(torch._C._functorch, "unwrap_if_dead")
    ):
        return None
    mro = function.__mro__
    after = mro[mro.index(torch.autograd.Function) + 1 :]
    if next((c for c in after if "apply" in vars(c)), None) is not base:
        return None  # something between Function and the C++ base defines apply
    return super(torch.autograd.Function, function).apply  # type: ignore[misc,no-any-return]


def wrap(
    layout: AutogradLayout,
    compiled_forward: CompiledFn,
    compiled_backward: CompiledFn,
    function: type[CompiledFunction] = CompiledFunction,
) -> CompiledFn:
    """The stage's compiled callable: flat args in, user outputs out. It
    pickles (Note [Picklable run-time callables] in ``conveyor.protocol.artifacts``)
    as the program's :class:`BackwardGraph`: the program's own
    ``CompiledFunction`` class is made again on load."""
    marker = backward_graph_of(function)
    undefined = None if marker is None else marker.undefined
    backward = _Backward.of(layout, compiled_backward, undefined)
    direct = _direct_apply(function)
    gets_grad = set(layout.grad_inputs)
    cut = tuple(i for i in range(layout.num_inputs) if i not in gets_grad)
    if direct is None:

        def run(args: list[Any]) -> Sequence[Any]:
            args = _without_edges(args, cut)
            return function.apply(layout, compiled_forward, backward, *args)  # type: ignore[no-any-return]

    else:
        transforms_active = torch._C._are_functorch_transforms_active
        unwrap = torch._C._functorch.unwrap_if_dead
        compiling = torch.compiler.is_compiling

        def run(args: list[Any]) -> Sequence[Any]:
            args = _without_edges(args, cut)
            if not transforms_active() and not compiling():  # dynamo traces Function.apply
                try:
                    inputs = tuple(map(unwrap, args))  # Function.apply's unwrap_dead_wrappers, all tensors
                except TypeError:  # a non-tensor input: torch's own apply
                    pass
                else:
                    return direct(layout, compiled_forward, backward, *inputs)  # type: ignore[no-any-return]
            return function.apply(layout, compiled_forward, backward, *args)  # type: ignore[no-any-return]

    return reducible(run, _loaded, layout, compiled_forward, compiled_backward, marker)


def _without_edges(args: list[Any], cut: tuple[int, ...]) -> list[Any]:
    """Note [Inputs that get no gradient]: an input that requires grad but
    that no output's gradient reaches (the program detaches it, or only
    reads its shape) is handed to ``apply`` detached, so that the program's
    node has no edge to it. With an edge, autograd's engine would still run
    the node behind it, with zeros (a ``Function``'s materialized grads):
    eager never reaches that node. A GAN step that backwards the
    generator's loss and then ``d_loss`` through ``fake.detach()`` ran the
    generator's compiled backward a second time, after its saved tensors
    were freed."""
    out = args
    for i in cut:
        a = args[i]
        if isinstance(a, torch.Tensor) and a.requires_grad:
            if out is args:
                out = list(args)
            out[i] = a.detach()
    return out


def _loaded(
    layout: AutogradLayout, compiled_forward: CompiledFn, compiled_backward: CompiledFn, marker: BackwardGraph | None
) -> CompiledFn:
    function = CompiledFunction if marker is None else _function_class(marker)
    return wrap(layout, compiled_forward, compiled_backward, function)
