"""Keeping ``torch.no_grad()`` regions when capturing below autograd.

``make_fx`` traces below autograd, so a region the user ran under
``torch.no_grad()`` leaves no trace in the graph: replayed with grad on, its
results would require grad and pull gradients that eager never computes.
During capture we tag each node with the grad mode it was traced under; then
``detach_no_grad_results`` puts an ``aten.detach`` after each no-grad result
that would otherwise carry grad, so every later trace (functionalized, joint)
and every backend sees the same semantics as eager.

Note [Gradient cuts below autograd]: below autograd, ``aten.detach.default``
is the only record that a value stops carrying gradient: this module, the
functionalize stage's view replay and the autograd stage's joint trace all
read it as the cut. ``make_fx`` given no decomposition table picks torch's own
defaults, and those changed: torch 2.14 records ``detach`` as ``aten.alias``
(a no-op decomposition), after which every cut would vanish silently and
gradients flow where eager's stop. So every conveyor trace goes through
:func:`trace_below_autograd`, which always passes an explicit table, and two
checks make any future change loud: a probe at the first trace traces one ``detach``
and demands an ``aten.detach.default`` node (:func:`probe_detach_recording`),
and during every trace each ``detach`` the program dispatches must leave one
(:class:`GradModeTagger`), else :class:`~conveyor.errors.CaptureError`.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import operator
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any

import torch
import torch.fx
from torch._dispatch.python import enable_python_dispatcher
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.proxy_tensor import get_proxy_mode, make_fx
from torch.utils._python_dispatch import TorchDispatchMode

from conveyor.analysis.out_overlap import check_out_overlap
from conveyor.analysis.schema import is_view, writes, written_args
from conveyor.analysis.symbolic import symbolic_layout
from conveyor.errors import CaptureError

GRAD_META = "conveyor_grad_enabled"
_DETACH = torch.ops.aten.detach.default


class GradModeTagger(TorchDispatchMode):
    """Pushed inside a ``make_fx`` trace: tags the nodes each op creates with
    ``torch.is_grad_enabled()`` at the time of the call (``tag=False``: no
    tags), and checks that each ``detach`` leaves an ``aten.detach.default``
    node (Note [Gradient cuts below autograd])."""

    #: a higher-order operator (a mutating custom op's ``auto_functionalized``)
    #: is recorded like any op: called on below this mode, its nodes tagged
    supports_higher_order_operators = True

    def __init__(self, tag: bool = True) -> None:
        super().__init__()
        self.tag = tag

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        if kwargs:
            check_out_overlap(func, args, kwargs)  # Note [out= overlapping an input]
        mark = _mark()
        out = func(*args, **(kwargs or {}))
        if mark is None or not ((self.tag and not torch.is_grad_enabled()) or func is _DETACH):
            return out
        made = _made_since(mark)
        if self.tag and not torch.is_grad_enabled():
            for node in made:
                node.meta[GRAD_META] = False
        if func is _DETACH and made and not any(n.target is _DETACH for n in made):
            raise CaptureError(_lost_cut([n.target for n in made]))
        return out


def _lost_cut(recorded: Sequence[Any]) -> str:
    return (
        f"capture: torch {torch.__version__}'s make_fx recorded a detach as {', '.join(map(str, recorded))}, "
        "not aten.detach.default, so the gradient cut would be lost and gradients would flow where eager's "
        "stop (Note [Gradient cuts below autograd] in conveyor.analysis.grad_regions): this torch changed how "
        "make_fx records detach"
    )


def trace_below_autograd(
    fn: Callable[..., Any],
    *,
    decomposition_table: Mapping[Any, Callable[..., Any]] | None = None,
    pre_dispatch: bool = False,
    tag_grad_mode: bool = True,
) -> Callable[..., torch.fx.GraphModule]:
    """``make_fx(fn)`` as every conveyor trace runs it: with an explicit
    decomposition table (a copy of ``decomposition_table``, empty if none),
    each node tagged with its grad mode (``tag_grad_mode``) and each gradient
    cut checked (Note [Gradient cuts below autograd])."""

    _probe_once()

    def watched(*flat: Any) -> Any:
        # Note [Symbolic sizes through composite ops]: torch 2.11 and 2.12's C++
        # ``matmul`` reads sizes as ints, which specializes every symbol it meets;
        # torch's Python decompositions of composite ops keep them. make_fx's own
        # symbolic mode and AOTAutograd run under the Python dispatcher for this,
        # and so does a conveyor trace whose inputs have symbolic sizes.
        symbolic = any(isinstance(t, torch.Tensor) and symbolic_layout(t) for t in flat)
        with enable_python_dispatcher() if symbolic else contextlib.nullcontext(), GradModeTagger(tag=tag_grad_mode):
            return fn(*flat)

    return make_fx(watched, decomposition_table=dict(decomposition_table or {}), pre_dispatch=pre_dispatch)


@functools.cache
def _probe_once() -> None:
    # at the first trace, not at import: tracing imports triton, whose interpreter
    # switch must still be free to set (conveyor_triton's Note [Choosing Triton's interpreter])
    probe_detach_recording()


def probe_detach_recording() -> None:
    """Trace ``x.detach()`` on a fake tensor as conveyor traces programs and
    demand one ``aten.detach.default`` node; raise :class:`CaptureError`
    naming what the installed torch records instead."""
    with FakeTensorMode() as mode:
        x = mode.from_tensor(torch.empty(2), static_shapes=True).requires_grad_()
        # the per-op check would raise first; the probe says what it found either way
        gm = make_fx(lambda t: t.detach(), decomposition_table={})(x)
    recorded = [n.target for n in gm.graph.nodes if n.op == "call_function"]
    if recorded != [_DETACH]:
        raise CaptureError(_lost_cut(recorded))


@contextlib.contextmanager
def recorded_with_grad(op: str | None = None) -> Iterator[None]:
    """The nodes a trace records inside this block (only those of the op
    named ``op``, ``"namespace::name"``, where given) are tagged as run with
    grad enabled, whatever the grad mode when they were recorded: for an op
    whose own autograd runs it inside an ``autograd.Function``'s forward (a
    custom op's, Note [Custom ops] in ``conveyor.frontend.fallback``), which
    runs under ``no_grad``, while the caller's grad mode is on."""
    mark = _mark()
    yield
    if mark is None:
        return
    made = _made_since(mark)
    if op is not None:  # the op's nodes, and the elements taken from their results, at any depth
        ops = {n for n in made if isinstance(n.target, torch._ops.OpOverload) and n.target._schema.name == op}
        for n in reversed(made):  # oldest first: an element's element comes after it
            if n.target is operator.getitem and n.args[0] in ops:
                ops.add(n)
        made = [n for n in made if n in ops]
    for node in made:
        node.meta.pop(GRAD_META, None)


_Mark = tuple[torch.fx.Graph, "torch.fx.Node | None"]


def _mark() -> _Mark | None:
    """The graph the current ``make_fx`` trace records into and its last node."""
    mode = get_proxy_mode()
    if mode is None:
        return None
    graph = mode.tracer.graph
    last = graph._root.prev  # the graph's last node (its root when empty), as ``_made_since`` walks it
    return graph, None if last is graph._root else last


def _made_since(mark: _Mark) -> list[torch.fx.Node]:
    """The nodes recorded after ``mark``, the latest first."""
    graph, last = mark
    made = []
    node = graph._root.prev
    while node is not last and node is not graph._root:
        made.append(node)
        node = node.prev
    return made


class _GradModeInterpreter(torch.fx.Interpreter):
    def run_node(self, n: torch.fx.Node) -> Any:
        if not n.meta.get(GRAD_META, True):
            with torch.no_grad():
                return super().run_node(n)
        if not torch.is_grad_enabled():
            return super().run_node(n)
        # a node captured with grad records its replay with grad too, also where its own
        # autograd runs it inside a Function's no_grad forward (a custom op's, Note [Custom ops])
        with recorded_with_grad():
            return super().run_node(n)


def call_graph(graph: torch.fx.GraphModule, args: Sequence[Any]) -> tuple[Any, ...]:
    """Run ``graph`` on ``args`` with each node under the grad mode it was
    captured under. Stages call a request's graph this way inside the
    function they retrace, so ``no_grad`` regions survive every retrace
    (``conveyor.retrace`` tags the new nodes again)."""
    return tuple(_GradModeInterpreter(graph).run(*args))


def detach_no_grad_results(gm: torch.fx.GraphModule, inputs: tuple[Any, ...]) -> torch.fx.GraphModule:
    """Insert ``aten.detach`` after no-grad results that would otherwise
    require grad when the graph is replayed with grad enabled.

    A view taken under ``no_grad`` stays attached for the writes made
    through it and for the views taken of it in the same region (a write
    through it must reach its base, whose autograd identity the stages keep);
    every other use reads the detached value, as eager's gradients never flow
    through such a view."""
    if not torch.is_grad_enabled() and not any(
        n.meta.get(GRAD_META, True) for n in gm.graph.nodes if n.op == "call_function"
    ):
        # Note [A program run wholly under no_grad]: every node was traced
        # under no_grad and so is the call (the compile-cache key holds the
        # grad mode), so no result can require grad and a detach is a node
        # eager never runs; stages replay the graph with ``call_graph``,
        # which keeps each node's mode.
        return gm
    would_require: dict[torch.fx.Node, bool] = {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node, value in zip(placeholders, inputs, strict=False):
        would_require[node] = isinstance(value, torch.Tensor) and value.requires_grad
    changed = False
    for node in list(gm.graph.nodes):
        if node.op != "call_function":
            continue
        from_grad = any(would_require.get(a, False) for a in node.all_input_nodes)
        if node.meta.get(GRAD_META, True) or writes(node):
            would_require[node] = from_grad
            continue
        val = node.meta.get("val")
        view = is_view(node)
        would_require[node] = from_grad and view
        if from_grad and isinstance(val, torch.Tensor) and (val.is_floating_point() or val.is_complex()):
            with gm.graph.inserting_after(node):
                detached = gm.graph.call_function(torch.ops.aten.detach.default, (node,))
            detached.meta["val"] = val

            def reads_detached(
                user: torch.fx.Node, node: torch.fx.Node = node, detached: torch.fx.Node = detached, view: bool = view
            ) -> bool:
                if user is detached:
                    return False
                if view and not user.meta.get(GRAD_META, True):
                    return not (is_view(user) or any(w is node for w in written_args(user)))
                return True

            node.replace_all_uses_with(detached, delete_user_cb=reads_detached)
            changed = True
    if changed:
        gm.recompile()
    return gm


def drop_inert_detaches(gm: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """For a backend whose callable runs under ``no_grad``
    (``Request.grad_enabled`` false: an inference call, the forward and
    backward of the autograd stage): a copy of ``gm`` without the
    ``aten.detach`` nodes that only feed other nodes. Under ``no_grad`` such
    a detach changes no value and no result's autograd state, so it is a
    node eager never runs. A detach that is a graph output stays (the caller
    may tell outputs apart by identity), and a graph that writes keeps all
    (a write through a detached alias is the stages' business). ``gm`` is
    returned as it is when there is nothing to drop."""
    nodes = gm.graph.nodes
    output = next((n for n in reversed(nodes) if n.op == "output"), None)
    returned = set(output.all_input_nodes) if output is not None else set()
    inert = [
        n
        for n in nodes
        if n.op == "call_function" and n.target is torch.ops.aten.detach.default and n not in returned
    ]
    if not inert or any(writes(n) for n in nodes if n.op == "call_function"):
        return gm
    names = frozenset(n.name for n in inert)
    graph = copy.deepcopy(gm.graph)
    for node in list(graph.nodes):
        if node.name in names:
            source = node.args[0]
            assert isinstance(source, torch.fx.Node)
            node.replace_all_uses_with(source)
            graph.erase_node(node)
    return torch.fx.GraphModule(gm, graph)
