"""What a program is: the record the core keeps for each request's graph.

Note [The program record]: stages must not re-derive what another stage or
the core already knows. Every :class:`~conveyor.protocol.stage.Request` carries one
:class:`Program` (``request.program``) for its graph and fake inputs, and
each part of it is computed the first time a stage asks and kept, so a
pipeline whose stages ask nothing pays nothing, and a part asked by several
stages is computed once. A stage that passes a request through unchanged
hands the next stage the same record (with what it already holds); a new
graph or new inputs make a new record.

The parts, cheapest first:

* :attr:`Program.aliasing`: the input aliasing signature, from the fake
  inputs alone: which tensor inputs share a storage, which of those share
  a byte (exact, ``conveyor.analysis.overlap``) and which are the same
  tensor, as the compile-cache key groups them (the fake inputs' own
  :class:`~conveyor.analysis.signature.CallSignature`: Note [The call signature]).
* :attr:`Program.writing_nodes` and :attr:`Program.outputs_computed`: from
  the graph and the op facts (``conveyor.analysis.schema``) without running anything:
  the nodes that write memory or swap a storage, and whether every tensor
  output is computed and aliases no input and no other output. With no
  writing node and computed outputs the program is functional
  (:attr:`Program.statically_functional`), so a stage with nothing to do
  for it can pass it through without tracing.
* :attr:`Program.analysis` / :attr:`Program.meta`: the exact per-input and
  per-output facts (:class:`~conveyor.analysis.program_meta.ProgramMeta`: data,
  metadata and storage mutations; how outputs alias inputs and
  intermediates), from one run of the graph on functional tensors
  (``conveyor.analysis.functional_analysis``).

Note [One functional run]: the exact part comes from running the graph on
functional tensors, and a stage that traces the functional program runs it
so again inside its trace. Such a stage may hand the record its own run
instead (:meth:`Program.analysis_from`): the record reads the same facts
from it (``conveyor.analysis.functional_analysis.read_run``) and keeps them,
so the program runs functionally once. The run must be the program's own,
on its inputs or a trace's stand-ins of them, each node under its captured
grad mode, with no write of the runner's; whether a record holds a part
already (:meth:`Program.holds`: a stage before asked for it) tells a stage
whether handing its run saves anything.

Note [Declared reads]: a stage declares the parts it reads
(``StageSpec.reads``), and the core holds it to that: the stage receives
its request with a :class:`ProgramView` of the record, which hands out the
declared parts (computed and kept on the one record, so what a stage asks
is there for the next) and raises a ``StageError`` naming the stage and the
part for any other. The record's own fields (``graph``, ``inputs``,
``fake_mode``, ``grad_enabled``) are the request's and need no declaration.
A declaration is then what ``conveyor stages`` prints and a reader can
trust: no stage depends on a part of the program it does not name. The
check costs one attribute lookup per read, at compile time only.
"""

from __future__ import annotations

import operator
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import torch
import torch.fx

from conveyor.analysis.functional_analysis import Analysis, analyze, read_run
from conveyor.analysis.functional_run import FunctionalRun
from conveyor.analysis.program_meta import ProgramMeta
from conveyor.analysis.schema import op_facts
from conveyor.analysis.signature import CallSignature
from conveyor.errors import StageError

#: the parts of :class:`Program` a stage can declare it reads (``StageSpec.reads``)
PARTS = ("aliasing", "writing_nodes", "outputs_computed", "statically_functional", "analysis", "meta")
#: the record's own fields: the request's, readable without a declaration
FIELDS = ("graph", "inputs", "fake_mode", "grad_enabled")


class InputAliasing:
    """Which inputs share memory: the program record's view of its fake
    inputs' :class:`~conveyor.analysis.signature.CallSignature` (Note [The
    call signature]). Each fact is computed when first asked: which inputs
    are one tensor (``dedupe``) never compares layouts, so it never reads a
    symbolic size, which would specialize it.

    :ivar signature: the inputs' signature.
    """

    __slots__ = ("signature",)

    def __init__(self, signature: CallSignature) -> None:
        self.signature = signature

    @staticmethod
    def of(inputs: Sequence[Any]) -> InputAliasing:
        """The aliasing of ``inputs`` (fake or real tensors)."""
        return InputAliasing(CallSignature.of(inputs))

    @property
    def groups(self) -> tuple[int, ...]:
        """Per input, the position of the first tensor input in its storage
        (itself when it is the first; ``-1`` for non-tensors and non-strided
        tensors)."""
        return self.signature.groups

    @property
    def overlapping(self) -> frozenset[tuple[int, int]]:
        """The pairs ``(j, i)``, ``j < i``, of inputs in one storage that have
        a byte in common (exact for static layouts; pairs with a symbolic
        layout are taken to overlap)."""
        return self.signature.overlapping

    @property
    def same(self) -> tuple[int, ...]:
        """Per input, the first position holding the same tensor (its own
        position when none earlier does)."""
        return self.signature.same

    @property
    def shares_storage(self) -> bool:
        """Some two tensor inputs share a storage."""
        return any(g >= 0 and g != i for i, g in enumerate(self.groups))

    @property
    def has_duplicates(self) -> bool:
        """Some tensor is passed in two positions."""
        return any(f != i for i, f in enumerate(self.same))

    def overlap(self, i: int, j: int) -> bool:
        """Inputs ``i`` and ``j`` (different) have a byte in common."""
        return (min(i, j), max(i, j)) in self.overlapping

    def __repr__(self) -> str:
        return f"InputAliasing(groups={self.groups})"


@dataclass(frozen=True, eq=False)
class Program:
    """The record of one request's program (Note [The program record]).

    :ivar graph: the request's graph.
    :ivar inputs: its fake inputs, one per placeholder.
    :ivar fake_mode: their fake mode.
    :ivar grad_enabled: the grad mode the program will run under.
    """

    graph: torch.fx.GraphModule
    inputs: tuple[Any, ...]
    fake_mode: Any
    grad_enabled: bool = True

    @cached_property
    def aliasing(self) -> InputAliasing:
        """Which inputs share a storage, and which of those overlap."""
        return InputAliasing.of(self.inputs)

    @cached_property
    def writing_nodes(self) -> tuple[torch.fx.Node, ...]:
        """The nodes that write memory, declared or not (``native_batch_norm``'s
        running statistics), or may swap a tensor's storage; a call of anything
        but an aten op counts too (nothing says what it does)."""
        return tuple(n for n in self.graph.graph.nodes if n.op == "call_function" and not _known_pure(n))

    @cached_property
    def outputs_computed(self) -> bool:
        """Every tensor output is computed by the program and shares memory
        with nothing the caller sees: each is a new value, or a chain of views
        of an intermediate that no other output reaches; none is an input, a
        view of one, or another output (``ProgramMeta``'s ``FRESH`` and
        ``VIEW_OF_INTERMEDIATE`` outputs, told from the graph)."""
        (output,) = (n for n in self.graph.graph.nodes if n.op == "output")
        roots: set[torch.fx.Node] = set()
        for value in output.args[0]:  # type: ignore[union-attr]
            if not isinstance(value, torch.fx.Node) or not isinstance(value.meta.get("val"), torch.Tensor):
                continue  # a constant, or a SymInt under dynamo: no memory
            root = _view_root(value)
            if root is None or root in roots or root.op != "call_function":
                return False
            roots.add(root)
        return True

    @property
    def statically_functional(self) -> bool:
        """No write and fresh outputs: the program is functional, known from
        the graph and the op facts alone."""
        return not self.writing_nodes and self.outputs_computed

    @cached_property
    def analysis(self) -> Analysis:
        """The exact facts and the functional run they came from (one run,
        the first time any stage asks).

        Note [Views under inference_mode]: a program compiled under
        ``torch.inference_mode()`` would be analysed on inference tensors,
        whose views record no ``_base`` (so outputs that view one
        intermediate look like unrelated fresh tensors) and which
        functionalization refuses to resize. The analysis runs with inference
        mode off (unless an input requires grad: a functional wrapper of an
        inference tensor cannot), under the request's grad mode."""
        requires_grad = any(isinstance(t, torch.Tensor) and t.requires_grad for t in self.inputs)
        with torch.inference_mode(torch.is_inference_mode_enabled() and requires_grad):
            with torch.set_grad_enabled(self.grad_enabled):
                return analyze(self.graph, self.inputs, self.fake_mode)

    @property
    def meta(self) -> ProgramMeta:
        """What the program mutates per input and how its outputs alias
        (see :attr:`analysis`)."""
        return self.analysis.meta

    def holds(self, part: str) -> bool:
        """Whether ``part`` (one of :data:`PARTS`) is computed already; asking
        computes nothing."""
        if part not in PARTS:
            raise ValueError(f"no program part {part!r}; the parts are {PARTS}")
        return part in self.__dict__ or (part == "meta" and "analysis" in self.__dict__)

    def analysis_from(self, run: FunctionalRun) -> Analysis:
        """The :attr:`analysis` part, read from ``run``, a functional run of
        this program made elsewhere, and kept (Note [One functional run]);
        the part the record holds already when it does."""
        if "analysis" not in self.__dict__:
            # a frozen dataclass: set the part where cached_property keeps it
            self.__dict__["analysis"] = read_run(self.inputs, run)
        return self.analysis

    def seen_by(self, stage: str, reads: Collection[str]) -> ProgramView:
        """This record as ``stage``, which declares ``reads``, may read it
        (Note [Declared reads])."""
        return ProgramView(self, stage, frozenset(reads))


class ProgramView:
    """One stage's view of a :class:`Program`: its fields and the parts the
    stage declares (Note [Declared reads]).

    :ivar record: the whole record the view shows.
    :ivar stage: the stage reading through it.
    :ivar reads: the parts it declares.
    """

    __slots__ = ("reads", "record", "stage")

    def __init__(self, record: Program, stage: str, reads: frozenset[str]) -> None:
        self.record = record
        self.stage = stage
        self.reads = reads

    def __getattr__(self, name: str) -> Any:
        if name in PARTS:
            if name not in self.reads:
                raise StageError(self.stage, f"reads program part {name!r} it does not declare in StageSpec.reads")
            return getattr(self.record, name)
        if name in FIELDS:
            return getattr(self.record, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")

    def seen_by(self, stage: str, reads: Collection[str]) -> ProgramView:
        """The same record as another stage may read it."""
        return self.record.seen_by(stage, reads)

    def holds(self, part: str) -> bool:
        """:meth:`Program.holds` (reads no part)."""
        return self.record.holds(part)

    def analysis_from(self, run: FunctionalRun) -> Analysis:
        """:meth:`Program.analysis_from`, for a stage that declares ``analysis``."""
        if "analysis" not in self.reads:
            raise StageError(self.stage, "reads program part 'analysis' it does not declare in StageSpec.reads")
        return self.record.analysis_from(run)

    def __repr__(self) -> str:
        return f"ProgramView(stage={self.stage!r}, reads={sorted(self.reads)})"


def _known_pure(node: torch.fx.Node) -> bool:
    """``node`` neither writes memory nor swaps a storage, by the op facts."""
    target = node.target
    if target is operator.getitem:
        return True
    if isinstance(target, torch._ops.OpOverload):
        facts = op_facts(target)
        return not (facts.writes_memory or facts.storage_swap)
    # SymInt arithmetic (``operator.mul``, ``torch.sym_max``...) under dynamo
    return not isinstance(node.meta.get("val"), torch.Tensor)


def _view_root(node: torch.fx.Node) -> torch.fx.Node | None:
    """The value ``node`` views, following chains of views (``node`` itself
    when it is no view); ``None`` when the op facts cannot tell."""
    while True:
        if node.target is operator.getitem:  # an element of a multi-output op's result
            source = node.args[0]
            if not isinstance(source, torch.fx.Node):
                return None
            if not _returns_alias(source):
                return node
            node = source
            continue
        if node.op != "call_function" or not _returns_alias(node):
            return node
        viewed = _aliased_args(node)
        if len(viewed) != 1:
            return None
        node = viewed[0]


#: ops whose result shares its argument's memory although their schema
#: declares no alias (functionalization makes them views, as eager's kernel is)
_UNDECLARED_VIEWS = frozenset({torch.ops.aten._unsafe_view.default})


def _returns_alias(node: torch.fx.Node) -> bool:
    if not isinstance(node.target, torch._ops.OpOverload):
        return node.op == "call_function"  # an unknown call may return anything
    if node.target in _UNDECLARED_VIEWS:
        return True
    return any(r.alias_sets for r in op_facts(node.target).aliasing.returns)


def _aliased_args(node: torch.fx.Node) -> list[torch.fx.Node]:
    """The node arguments whose memory ``node``'s result may alias."""
    if not isinstance(node.target, torch._ops.OpOverload):
        return []
    if node.target in _UNDECLARED_VIEWS:
        first = node.args[0]
        return [first] if isinstance(first, torch.fx.Node) else [node, node]
    aliasing = op_facts(node.target).aliasing
    sets = frozenset().union(*(r.alias_sets for r in aliasing.returns))
    out: list[torch.fx.Node] = []
    for k, arg in enumerate(aliasing.args):
        if not arg.alias_sets & sets:
            continue
        value = node.args[k] if k < len(node.args) else node.kwargs.get(arg.name)
        if not isinstance(value, torch.fx.Node):
            return [node, node]  # a list or a missing argument: more than one candidate
        out.append(value)
    return out
