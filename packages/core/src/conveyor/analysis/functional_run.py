"""Running an FX graph on functional tensors.

``run_functional`` wraps the inputs in ``FunctionalTensor``s and interprets the
graph under ``FunctionalTensorMode``: every in-place op, ``out=`` op and view
becomes a functional op plus bookkeeping in the wrappers, which afterwards
tell which inputs were mutated and how. ``conveyor.call_graph`` runs each node
under the grad mode it was captured under, so mutations done under
``torch.no_grad()`` are recognised as such.

The program record runs it once per graph to collect
:class:`~conveyor.analysis.program_meta.ProgramMeta` (``conveyor.analysis.program``); the
functionalize stage runs it again inside its trace, with its own interpreter.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
import torch.utils._pytree as pytree
from torch._dispatch.python import enable_python_dispatcher
from torch._subclasses.fake_tensor import FakeTensor
from torch._subclasses.functional_tensor import FunctionalTensor, FunctionalTensorMode
from torch.utils._python_dispatch import _disable_infra_mode

from conveyor.analysis.grad_regions import call_graph
from conveyor.analysis.schema import is_effectful

#: runs a graph on (functional) arguments and returns its outputs
GraphRunner = Callable[[torch.fx.GraphModule, Sequence[Any]], Sequence[Any]]


@dataclass(frozen=True)
class FunctionalRun:
    """The inputs wrapped as functional tensors, after the program ran on
    them, and the program's outputs (functional tensors too)."""

    f_inputs: tuple[Any, ...]
    f_outputs: tuple[Any, ...]
    #: each input wrapper's ``grad_fn`` before the program ran: a data
    #: mutation that leaves it unchanged was hidden from autograd (done under
    #: ``no_grad`` or through a ``detach``-ed alias), as in eager
    grad_fns_before: tuple[Any, ...] = ()


def to_functional(value: Any) -> Any:
    """A functional wrapper of a tensor; other values as they are."""
    return FunctionalTensor.to_functional(value) if isinstance(value, torch.Tensor) else value


def wrap_inputs(inputs: Sequence[Any], mode: FunctionalTensorMode) -> tuple[Any, ...]:
    """Each tensor of ``inputs`` wrapped as :func:`to_functional` wraps it;
    call it with ``mode`` active.

    Note [Wrapping inputs below the functional mode]: torch's
    ``FunctionalTensor.to_functional`` makes the C++ wrapper
    (``torch._to_functional_tensor``) with the functional mode active, and the
    wrapper asks its fake input for its device: a ``prim.device`` dispatch
    that takes ``FunctionalTensorMode``'s whole Python path before the fake
    mode answers it, about three quarters of the wrap (a CNN's 315
    parameters and buffers, once per functional run). The device is the fake
    mode's answer either way, so the C++ wrappers are made with the
    functional mode off the stack (once for all inputs); the rest is
    torch's own steps in its order, under the mode: autograd metadata
    mirrored onto the C++ wrapper, the Python wrapper, the metadata mirrored
    onto it. Where torch lacks one of those steps, or an input is not a
    plain ``torch.Tensor`` or ``FakeTensor`` (a subclass may answer
    differently), it is ``to_functional`` as before."""
    if not _WRAP_STEPS or not all(type(v) in _PLAIN or not isinstance(v, torch.Tensor) for v in inputs):
        return tuple(to_functional(v) for v in inputs)
    with contextlib.contextmanager(_disable_infra_mode)(torch._C._TorchDispatchModeKey.FUNCTIONAL):
        inner = [_make_functional(v) if isinstance(v, torch.Tensor) else None for v in inputs]
    out: list[Any] = []
    for v, f in zip(inputs, inner, strict=True):
        if f is None:
            out.append(v)
            continue
        torch._mirror_autograd_meta_to(v, f)  # type: ignore[attr-defined]
        wrapped = FunctionalTensor(f, mode)
        torch._mirror_autograd_meta_to(f, wrapped)  # type: ignore[attr-defined]
        out.append(wrapped)
    return tuple(out)


def _make_functional(v: torch.Tensor) -> torch.Tensor:
    if torch._is_functional_tensor(v):
        raise AssertionError("x must not already be a functional tensor")  # as torch's to_functional
    return torch._to_functional_tensor(v)


#: the types whose device a wrapper's query reads the same with the
#: functional mode off (Note [Wrapping inputs below the functional mode])
_PLAIN = (torch.Tensor, torch.nn.Parameter, FakeTensor)
#: torch has each step of ``FunctionalTensor.to_functional`` we take
_WRAP_STEPS = all(
    hasattr(torch, name) for name in ("_to_functional_tensor", "_mirror_autograd_meta_to", "_is_functional_tensor")
)


def from_functional(value: Any) -> Any:
    """The plain tensor behind a functional one, after syncing pending
    updates into it."""
    if not isinstance(value, FunctionalTensor):
        return value
    torch._sync(value)
    return torch._from_functional_tensor(value.elem)


def run_functional(graph: torch.fx.GraphModule, inputs: Sequence[Any], runner: GraphRunner = call_graph) -> FunctionalRun:
    """Interpret ``graph`` on functional wrappers of ``inputs``.

    Call it under the fake mode of ``inputs`` (or inside a trace). The
    wrappers are synced before returning, so their mutation flags are final.

    :param runner: how the graph is run on the wrappers (the default keeps
        each node's captured grad mode; a stage tracing the functional
        program may pass an interpreter of its own).
    """
    # Note [Disabling Functionalize TLS Above Python Functionalization] in torch:
    # the C++ functionalization key must not run above the Python mode.
    disable_above = torch._C._ExcludeDispatchKeyGuard(torch._C.DispatchKeySet(torch._C.DispatchKey.Functionalize))
    # the Python dispatcher lets Python decompositions (e.g. torch._refs.clamp)
    # see SymInts under symbolic shapes, as make_fx and AOTAutograd enable it
    with disable_above, enable_python_dispatcher(), FunctionalTensorMode() as mode:
        f_inputs = wrap_inputs(inputs, mode)  # Note [Wrapping inputs below the functional mode]
        grad_fns = tuple(f.grad_fn if isinstance(f, torch.Tensor) else None for f in f_inputs)
        outs = runner(_effects_outside(graph), f_inputs)
        for f in f_inputs:
            if isinstance(f, FunctionalTensor):
                torch._sync(f)
    if not isinstance(outs, (tuple, list)):
        raise TypeError(f"the graph must return a tuple of outputs, not {type(outs).__name__}")
    return FunctionalRun(f_inputs, tuple(outs), grad_fns)


def call_outside_functionalization(op: Any, *args: Any, **kwargs: Any) -> Any:
    """Run ``op`` on the plain tensors behind functional ones, below
    ``FunctionalTensorMode``.

    Note [Effectful ops]: ops that must run (such as
    ``aten._linalg_check_errors``, which raises on a singular matrix in
    ``linalg.inv`` or ``linalg.cholesky``; Note [Ops that must run] in
    ``conveyor.analysis.schema``) are effectful; functionalization would
    thread effect tokens through the program for them, as AOTAutograd does.
    They write no tensor, so we run them as they are, in program order, on the
    synced values: a trace records them, and they raise as in eager."""
    args, kwargs = pytree.tree_map_only(FunctionalTensor, from_functional, (args, kwargs))
    with contextlib.contextmanager(_disable_infra_mode)(torch._C._TorchDispatchModeKey.FUNCTIONAL):
        return op(*args, **kwargs)


def _effects_outside(graph: torch.fx.GraphModule) -> torch.fx.GraphModule:
    """``graph``, with each effectful op called through
    :func:`call_outside_functionalization` (a copy; ``graph`` is unchanged)."""
    if not any(_effectful(n) for n in graph.graph.nodes):
        return graph
    new = torch.fx.Graph()
    new.output(new.graph_copy(graph.graph, {}))
    for node in new.nodes:
        if _effectful(node):
            node.args = (node.target, *node.args)
            node.target = call_outside_functionalization
    return torch.fx.GraphModule(graph, new)


def _effectful(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and is_effectful(node)
