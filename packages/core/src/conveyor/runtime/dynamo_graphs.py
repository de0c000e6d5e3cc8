"""``last_graphs`` under ``torch.compile``: which dynamo graphs belong to which
compiled object.

Note [Graphs of a torch.compile'd object]: dynamo calls conveyor's backend
once per graph it captures, from the frame it is compiling, and installs
the result in that frame's code cache; ``torch.compile(model)`` returns an
object conveyor never sees. So each compiled graph (:class:`Piece`) records,
when the backend is called, the frame dynamo was compiling (dynamo's
``InstructionTranslator.current_tx()``): its code, mapped back from a resume
function (the rest of a frame after a graph break) to the code it resumes,
and the modules among its locals (``self``; ``fn`` in the wrapper frame of
``torch.compile(module)``). :func:`graphs_of` then answers for the object
the user holds:

- a module (``torch.compile(module)``'s result, or a module compiled with
  ``module.compile()``) owns the graphs of frames that had it among their
  locals, and the resume frames of those codes that hold no module;
- a function owns the graphs of its own code's frames and their resumes.

A call can run several graphs (graph breaks); what a call ran is the graph
of the object's first compiled frame (its entry) that ran last, and every
owned graph, one per frame, that ran after it, in the order they ran. Two
modules of one structure share dynamo's compiled code (its guards check
types, not identity), so the second runs the first one's graphs without a
backend call: they are the first module's, and asking the second is the
clear error of an object conveyor never compiled.
"""

from __future__ import annotations

import itertools
import types
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from conveyor.protocol.stamps import StageGraph
from conveyor.runtime.stored_graphs import Graphs, resolve

#: a tick per call of a compiled graph (which graph ran last, and in what order)
ticks: Callable[[], int] = itertools.count().__next__
_created = itertools.count()


@dataclass(frozen=True)
class Origin:
    """The frame dynamo was compiling when it called conveyor's backend.

    :ivar code: the frame's code object (a resume function's own code).
    :ivar resumes: the code the frame resumes after a graph break (itself
        when it is not a resume function).
    :ivar owners: weak references to the modules among the frame's locals.
    """

    code: types.CodeType
    resumes: types.CodeType
    owners: tuple[weakref.ref[torch.nn.Module], ...]

    @property
    def is_resume(self) -> bool:
        return self.code is not self.resumes

    def owned_by(self, module: torch.nn.Module) -> bool:
        return any(ref() is module for ref in self.owners)


@dataclass
class Piece:
    """One graph dynamo handed conveyor, and what its last call ran.

    :ivar origin: where dynamo compiled it from, or ``None`` (the backend
        was called outside a dynamo compile).
    :ivar last: ``(tick, stage graphs)`` of its last call, or ``None``.
    """

    origin: Origin | None
    last: tuple[int, Graphs] | None = None
    order: int = field(default_factory=lambda: next(_created))


_pieces: weakref.WeakValueDictionary[int, Piece] = weakref.WeakValueDictionary()


def new_piece() -> Piece:
    """A piece for the graph dynamo is compiling now (called by the backend)."""
    piece = Piece(_current_origin())
    _pieces[piece.order] = piece
    return piece


def _current_origin() -> Origin | None:
    try:
        from torch._dynamo.resume_execution import ContinueExecutionCache
        from torch._dynamo.symbolic_convert import InstructionTranslator

        tx = InstructionTranslator.current_tx()
    except Exception:  # not under a dynamo compile, or dynamo's internals moved
        return None
    if tx is None:
        return None
    code: types.CodeType = tx.f_code
    resumes = code
    metadata = ContinueExecutionCache.generated_code_metadata
    seen = 0
    while resumes in metadata and seen < 64:  # a resume of a resume: back to the user's code
        resumes, seen = metadata[resumes].code, seen + 1
    owners = tuple(
        weakref.ref(v) for k, v in tx.f_locals.items() if k in ("self", "fn") and isinstance(v, torch.nn.Module)
    )
    return Origin(code, resumes, owners)


def _target(obj: Any) -> Any:
    """The module or function behind what ``torch.compile`` returned."""
    orig = getattr(obj, "_orig_mod", None)  # OptimizedModule
    if isinstance(orig, torch.nn.Module):
        return orig
    obj = getattr(obj, "_torchdynamo_orig_callable", obj)
    if isinstance(obj, types.MethodType) and isinstance(obj.__self__, torch.nn.Module):
        return obj.__self__
    return obj


def _owned(target: Any, pieces: list[Piece]) -> list[Piece]:
    if isinstance(target, torch.nn.Module):
        direct = [p for p in pieces if p.origin is not None and p.origin.owned_by(target)]
        codes = {p.origin.resumes for p in direct if p.origin is not None}
        return direct + [
            p for p in pieces if p.origin is not None and not p.origin.owners and p.origin.resumes in codes
        ]
    code = getattr(getattr(target, "__func__", target), "__code__", None)
    return [p for p in pieces if p.origin is not None and code is not None and p.origin.resumes is code]


def graphs_of(obj: Any) -> tuple[StageGraph, ...]:
    """The stage graphs of the last call of a ``torch.compile``'d object
    (Note [Graphs of a torch.compile'd object]).

    :raises ValueError: conveyor compiled no graph for ``obj``, or none of
        its graphs has run yet.
    """
    target = _target(obj)
    owned = sorted(_owned(target, list(_pieces.values())), key=lambda p: p.order)
    if not owned:
        raise ValueError(
            f"last_graphs: conveyor compiled no graph for {_name(target)} "
            "(not compiled with torch.compile(..., backend='conveyor'), not called yet, "
            "or it runs graphs dynamo compiled for another module of the same structure)"
        )
    ran = [p for p in owned if p.last is not None]
    if not ran:
        raise ValueError(f"last_graphs: the graphs conveyor compiled for {_name(target)} have not run yet")
    entry = owned[0].origin
    assert entry is not None
    # latest run per frame code (a recompile replaces the graph it guards out)
    latest: dict[types.CodeType, tuple[int, Graphs]] = {}
    for p in ran:
        assert p.origin is not None and p.last is not None
        if p.origin.code not in latest or latest[p.origin.code][0] < p.last[0]:
            latest[p.origin.code] = p.last
    start = latest[entry.code][0] if entry.code in latest else min(t for t, _ in latest.values())
    calls = sorted((run for run in latest.values() if run[0] >= start), key=lambda run: run[0])
    return tuple(g for _, graphs in calls for g in resolve(graphs))


def last_run() -> tuple[StageGraph, ...]:
    """The stage graphs of the dynamo graph that ran last, whichever object
    it belongs to (prefer :func:`graphs_of`)."""
    runs = [p.last for p in list(_pieces.values()) if p.last is not None]
    if not runs:
        raise ValueError("last_graphs: nothing has been compiled by torch.compile(backend='conveyor') yet")
    return resolve(max(runs, key=lambda r: r[0])[1])


def _name(target: Any) -> str:
    if isinstance(target, torch.nn.Module):
        return f"the module {type(target).__qualname__}"
    return repr(getattr(target, "__qualname__", target))
