"""What a stage is and what flows between stages.

A *wrapper* stage has two halves, as AOTAutograd's wrappers do:

* compile time: ``lower(request, options) -> Lowering`` turns the request it
  receives into the request(s) the next stage receives;
* run time: ``Lowering.wrap(*compiled)`` wraps the compiled callable(s) of the
  next stage with the stage's own prologue / epilogue.

A *backend* stage turns the final request into a :data:`CompiledFn`.

Calling convention at run time (Note [Flat calling convention]): a compiled
callable takes one ``list`` of flat arguments (tensors, and ints / SymInts under
dynamo) in the order of ``request.graph``'s placeholders, and returns a
``list`` or ``tuple`` of flat outputs in the order of the graph's output node.
The list is the caller's to give away: a callee may clear it to free inputs.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

import torch.fx

from conveyor.analysis.program import PARTS, Program, ProgramView
from conveyor.analysis.signature import CallSignature

CompiledFn = Callable[[list[Any]], Sequence[Any]]
StageKind = Literal["wrapper", "backend"]


@dataclass(frozen=True)
class Request:
    """What one stage hands the next at compile time.

    :ivar graph: a flat FX graph at aten level; placeholders are the inputs,
        the output node returns a tuple of the outputs.
    :ivar inputs: one fake value per placeholder (fake tensors, ints, SymInts).
    :ivar fake_mode: the fake mode ``inputs`` belong to (dynamo's under
        ``torch.compile``).
    :ivar grad_enabled: the grad mode the compiled callable will run under.
    :ivar label: which program this is ("forward", "backward", ...), for
        introspection.
    :ivar backend_fuses_pointwise: the pipeline's backend fuses pointwise ops
        into its kernels (``StageSpec.fuses_pointwise``); the pipeline sets it
        on every request a stage receives (Note [Facts of the backend]).

    What the program is (input aliasing, mutations, output aliasing) is
    :attr:`program`, the core's record of this request's graph
    (Note [The program record] in ``conveyor.analysis.program``).
    """

    graph: torch.fx.GraphModule
    inputs: tuple[Any, ...]
    fake_mode: Any
    grad_enabled: bool = True
    label: str = "forward"
    backend_fuses_pointwise: bool = False

    def __post_init__(self) -> None:
        n = sum(1 for node in self.graph.graph.nodes if node.op == "placeholder")
        if n != len(self.inputs):
            raise ValueError(f"Request: graph has {n} placeholders but {len(self.inputs)} inputs")

    def replace(self, **changes: Any) -> Request:
        """A new request with ``changes``; it keeps this one's program record
        when only its ``label`` or its backend's facts change."""
        new = dataclasses.replace(self, **changes)
        if set(changes) <= {"label", "backend_fuses_pointwise"} and "program" in self.__dict__:
            object.__setattr__(new, "program", self.__dict__["program"])
        return new

    @functools.cached_property
    def program(self) -> Program:
        """The core's record of what this request's program is, each part
        computed when a stage first asks (Note [The program record])."""
        return Program(self.graph, self.inputs, self.fake_mode, self.grad_enabled)

    def seen_by(self, stage: StageSpec) -> Request:
        """This request as ``stage`` receives it: the same request, its
        program record showing the parts ``stage.reads`` declares and raising
        a ``StageError`` for any other (Note [Declared reads] in
        ``conveyor.analysis.program``). The parts it reads are kept on the
        one record, for the stages after it."""
        seen = copy.copy(self)  # no __post_init__: the graph and inputs are this request's
        seen.__dict__["program"] = self.program.seen_by(stage.name, stage.reads)
        return seen

    def with_whole_record(self) -> Request:
        """This request with its whole program record: itself, unless a stage
        handed on the request it was given (``Lowering.passthrough``, a new
        label), whose record is that stage's view."""
        program = self.__dict__.get("program")
        if not isinstance(program, ProgramView):
            return self
        whole = copy.copy(self)
        whole.__dict__["program"] = program.record
        return whole


@dataclass(frozen=True)
class Lowering:
    """A wrapper stage's compile-time result.

    :ivar requests: the request(s) for the next stage; most stages give one,
        the autograd stage gives a forward and a backward.
    :ivar wrap: the run-time half: takes the next stage's compiled callable(s),
        one per request in order, and returns this stage's compiled callable.
    """

    requests: tuple[Request, ...]
    wrap: Callable[..., CompiledFn]

    def __post_init__(self) -> None:
        if not self.requests:
            raise ValueError("Lowering needs at least one request")

    @staticmethod
    def passthrough(request: Request) -> Lowering:
        """The stage has nothing to do for this request."""
        return Lowering((request,), _identity_wrap)


def _identity_wrap(compiled: CompiledFn) -> CompiledFn:
    return compiled


@runtime_checkable
class WrapperImpl(Protocol):
    def lower(self, request: Request, options: Mapping[str, Any]) -> Lowering: ...


@runtime_checkable
class BackendImpl(Protocol):
    def compile(self, request: Request, options: Mapping[str, Any]) -> CompiledFn: ...


@dataclass(frozen=True)
class StageSpec:
    """How a stage declares itself to the core.

    :ivar name: unique stage name, used in config (``enable``, ``disable``,
        ``backend``, per-stage option tables).
    :ivar kind: ``"wrapper"`` or ``"backend"``.
    :ivar impl: an object with ``lower`` (wrapper) or ``compile`` (backend).
    :ivar after: stages that, when enabled, must run before this one (outer).
    :ivar before: stages that, when enabled, must run after this one (inner).
    :ivar requires: stages that must be enabled for this one to work,
        whatever the program (checked when the pipeline is built: a
        :class:`~conveyor.errors.ConfigError` names both stages). A need
        that depends on the program (``autograd`` needs ``functionalize``
        only for a program that writes) is a compile-time error instead.
    :ivar reads: the parts of the program record (``request.program``,
        :data:`conveyor.analysis.program.PARTS`) the stage reads, checked
        against the record's parts; ``conveyor stages`` shows them. The stage
        sees only these: reading another part raises a
        :class:`~conveyor.errors.StageError` naming the stage and the part
        (Note [Declared reads] in ``conveyor.analysis.program``).
    :ivar options: option names and their defaults; other names are errors.
    :ivar cache_key: optional; what this stage specializes on, added to the
        compile-cache key: called with the call's
        :class:`~conveyor.analysis.signature.CallSignature` (its flat inputs
        as ``signature.inputs``, which of them share storage, are the same
        tensor, overlap: Note [The call signature]); must return something
        hashable and be cheap: it runs on every call.
    :ivar enabled_by_default: a wrapper stage that is installed but off until
        enabled in config.
    :ivar description: one line for ``conveyor stages``.
    :ivar default_for: a backend only: the device types (``"cuda"``) it is
        the default backend for when the configuration names none; the core
        asks these declarations and names no backend itself.
    :ivar probe: optional; called with no arguments when a pipeline that
        includes this stage is built, to check what the stage needs from its
        environment (a torch internal it calls, a tool). It raises to refuse:
        the pipeline build fails with a :class:`~conveyor.errors.StageError`
        naming the stage. A stage installed but not in the pipeline is never
        probed, so one that cannot work here does not stop the others.
    :ivar fuses_pointwise: a backend only: it fuses pointwise ops into the
        kernels around them, so a pointwise op recomputed in a backward costs
        next to nothing (Inductor, Triton); false where each op is a call of
        its own (``eager``). Wrapper stages read it as
        ``request.backend_fuses_pointwise`` (Note [Facts of the backend]).

    Note [Facts of the backend]: a wrapper stage sometimes chooses by what
    the backend will make of its graphs: the autograd stage's partitioner
    recomputes cheap pointwise ops in the backward only where the backend
    fuses them, as AOTAutograd uses its min-cut partitioner for Inductor and
    saves what eager saves for other backends. The backend declares the fact
    here; the pipeline sets it on every request it hands a stage, so the core
    and the wrapper name no backend. A program is keyed on it through the
    backend's name and version (the in-memory cache is per pipeline, the disk
    key names each stage with its distribution's version).
    """

    name: str
    kind: StageKind
    impl: Any
    after: tuple[str, ...] = ()
    before: tuple[str, ...] = ()
    requires: tuple[str, ...] = ()
    reads: tuple[str, ...] = ()
    options: Mapping[str, Any] = field(default_factory=dict)
    cache_key: Callable[[CallSignature], Hashable] | None = None
    enabled_by_default: bool = True
    description: str = ""
    default_for: tuple[str, ...] = ()
    probe: Callable[[], None] | None = None
    fuses_pointwise: bool = False

    def __post_init__(self) -> None:
        if not self.name or not self.name.replace("_", "").isalnum():
            raise ValueError(f"stage name {self.name!r} must be a non-empty identifier")
        if self.kind == "wrapper" and not callable(getattr(self.impl, "lower", None)):
            raise TypeError(f"wrapper stage {self.name!r}: impl has no lower(request, options)")
        if self.kind == "backend" and not callable(getattr(self.impl, "compile", None)):
            raise TypeError(f"backend stage {self.name!r}: impl has no compile(request, options)")
        if self.kind not in ("wrapper", "backend"):
            raise ValueError(f"stage {self.name!r}: kind must be 'wrapper' or 'backend', not {self.kind!r}")
        if self.default_for and self.kind != "backend":
            raise ValueError(f"stage {self.name!r}: only a backend can be the default for a device type")
        if self.fuses_pointwise and self.kind != "backend":
            raise ValueError(f"stage {self.name!r}: only a backend can declare fuses_pointwise (it is a fact of the kernels it makes)")
        unknown = sorted(set(self.reads) - set(PARTS))
        if unknown:
            raise ValueError(f"stage {self.name!r}: reads unknown program record part(s) {unknown}; parts are {list(PARTS)}")
        if self.name in self.requires:
            raise ValueError(f"stage {self.name!r} cannot require itself")
        for attr in ("after", "before", "requires", "reads", "default_for"):
            value = getattr(self, attr)
            if isinstance(value, str):
                raise TypeError(f"stage {self.name!r}: {attr} must be a tuple of names, not a string")
            object.__setattr__(self, attr, tuple(value))
