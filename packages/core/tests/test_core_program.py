"""The program record (``conveyor.analysis.program``): what it says, that it is
computed once and only when asked, and the stage declarations checked when
the pipeline is built."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import conveyor
import conveyor.analysis.functional_analysis
import conveyor.analysis.program
import pytest
import torch
from conveyor import ConfigError, Lowering, Plugins, Request, StageError, StageSpec, hookimpl
from conveyor.analysis.functional_run import run_functional
from conveyor.analysis.program import InputAliasing, Program
from conveyor.testing import check
from conveyor.testing.pytest_plugin import pipeline_of
from torch._subclasses.fake_tensor import FakeTensorMode
from torch._subclasses.functional_tensor import FunctionalTensorMode
from torch.fx.experimental import proxy_tensor


def request_of(fn: Callable[..., Any], *args: Any) -> Request:
    """A request for ``fn`` traced on fakes of ``args`` (views stay views of one fake base)."""
    mode = FakeTensorMode()
    fakes = tuple(mode.from_tensor(a) if isinstance(a, torch.Tensor) else a for a in args)
    return Request(conveyor.retrace(lambda *xs: tuple(fn(*xs)), fakes, mode), fakes, mode)


def test_input_aliasing_groups_storages_and_tells_exact_overlap() -> None:
    base = torch.zeros(8)
    inputs = (base[:4], base[4:], base[2:6], torch.zeros(3), 2)
    aliasing = InputAliasing.of(inputs)
    assert aliasing.groups == (0, 0, 0, 3, -1)
    assert aliasing.overlapping == frozenset({(0, 2), (1, 2)})  # the two halves share no byte
    assert aliasing.shares_storage and aliasing.overlap(2, 0) and not aliasing.overlap(0, 1)
    assert not InputAliasing.of((torch.zeros(2), torch.zeros(2))).shares_storage
    x = torch.zeros(2)
    assert InputAliasing.of((x, torch.zeros(1), x)).same == (0, 1, 0) and InputAliasing.of((x, x)).has_duplicates


def test_which_inputs_are_one_tensor_leaves_symbolic_sizes_alone() -> None:
    """dedupe asks only ``same``: no layout is compared, so no size is specialized."""
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    mode = FakeTensorMode(shape_env=ShapeEnv())
    base = torch.zeros(4, 3)
    fake = mode.from_tensor(base)
    view = fake[1:]
    aliasing = InputAliasing.of((fake, view, fake))
    assert aliasing.same == (0, 1, 0)
    assert not mode.shape_env.guards  # nothing about the sizes was assumed
    assert aliasing.overlapping and mode.shape_env.guards  # overlap compares layouts: it does


def _pure(x, y):
    return (x * y).sin(), (x + 1).view(-1)  # a fresh value, and a view of an intermediate


def _in_place(x, y):
    x.mul_(2)
    return (x + y,)


def _returns_input(x, y):
    return x, y * 2


def _views_input(x, y):
    return x.t(), y + 1


def _view_and_its_base(x, y):
    z = x + y
    return z, z.view(-1)


def _two_views_of_one(x, y):
    z = x * y
    return z[0], z[1]


def _batch_norm_training(x, y):
    running = y[0].clone()
    out = torch.nn.functional.batch_norm(x, running, torch.ones(2), training=True)
    return (out,)  # native_batch_norm writes its running mean, undeclared


PROGRAMS = {
    _pure: True,
    _in_place: False,
    _returns_input: False,
    _views_input: False,
    _view_and_its_base: False,
    _two_views_of_one: False,
    _batch_norm_training: False,  # native_batch_norm writes the running mean, undeclared in its schema
}


@pytest.mark.parametrize("fn", list(PROGRAMS), ids=lambda f: f.__name__)
def test_static_facts_agree_with_the_functional_run(fn: Callable[..., Any]) -> None:
    request = request_of(fn, torch.randn(2, 2), torch.randn(2, 2))
    program = request.program
    static = program.statically_functional
    assert static == PROGRAMS[fn]
    if static:  # sound: never functional by the graph when the run says otherwise
        assert program.meta.is_functional
    if fn is _in_place:
        assert [n.target for n in program.writing_nodes] == [torch.ops.aten.mul_.Tensor]
        assert program.meta.data_mutated_inputs == (0,)


def test_the_record_is_computed_once_per_request_and_only_when_asked() -> None:
    request = request_of(_in_place, torch.randn(2, 2), torch.randn(2, 2))
    program = request.program
    assert program is request.program
    assert "analysis" not in program.__dict__  # nothing ran yet
    meta = program.meta
    assert program.meta is meta and "analysis" in program.__dict__
    assert request.replace(label="other").program is program  # the same program
    assert request.replace(grad_enabled=False).program is not program


@pytest.fixture
def counts(monkeypatch: pytest.MonkeyPatch) -> Iterator[Counter[str]]:
    """Counts ``make_fx`` runs, record analyses and runs on functional
    tensors (this test's patches only) through the default pipeline of the
    installed stages."""
    found: Counter[str] = Counter()
    trace, analyze = proxy_tensor._MakefxTracer.trace, conveyor.analysis.functional_analysis.analyze

    def counted_trace(self: Any, *args: Any) -> Any:
        found["make_fx"] += 1
        return trace(self, *args)

    def counted_analyze(*args: Any) -> Any:
        found["analysis"] += 1
        return analyze(*args)

    def counted_init(self: Any, *args: Any, **kwargs: Any) -> None:
        found["functional runs"] += 1
        init(self, *args, **kwargs)

    init = FunctionalTensorMode.__init__
    monkeypatch.setattr(FunctionalTensorMode, "__init__", counted_init)
    monkeypatch.setattr(proxy_tensor._MakefxTracer, "trace", counted_trace)
    monkeypatch.setattr(conveyor.analysis.program, "analyze", counted_analyze)
    monkeypatch.setenv("CONVEYOR_CACHE", "0")
    monkeypatch.setenv("CONVEYOR_AUTOLOAD", "1")
    monkeypatch.setenv("CONVEYOR_PLUGINS", "dedupe,synthetic_base,functionalize,autograd")
    yield found


def _mlp_step(w, x):
    return (torch.nn.functional.gelu(x @ w) + x).sum(1)


def test_a_functional_program_is_traced_once_and_never_analysed(counts: Counter[str]) -> None:
    w, x = torch.randn(4, 4), torch.randn(3, 4)
    with torch.no_grad():
        check(_mlp_step, w, x, compile=conveyor.compile)
    assert counts == {"make_fx": 1}  # capture only: functionalize and autograd pass it through
    counts.clear()
    check(lambda w, x: _mlp_step(w, x), w.requires_grad_(), x, compile=conveyor.compile)
    assert counts == {"make_fx": 2}  # capture and the joint trace


def test_a_mutating_program_is_analysed_once(counts: Counter[str]) -> None:
    def f(a, b):
        a.add_(1)
        return a * b

    base = torch.randn(8)
    check(f, base[:4], base[4:], compile=conveyor.compile)  # inputs share a storage, do not overlap
    # synthetic_base reads the record, merges nothing and passes the request on:
    # functionalize reads the same record
    assert counts["analysis"] == 1
    assert counts["make_fx"] == 2  # capture and the functional trace
    assert counts["functional runs"] == 2  # the record's, and the trace's


def test_a_program_writing_unshared_inputs_runs_functionally_once(counts: Counter[str]) -> None:
    """Note [One functional run]: no stage before functionalize reads the
    record, so the stage hands it the run of its own trace."""

    def f(a, b):
        a.add_(1)
        return a * b, b.t()

    check(f, torch.randn(2, 4), torch.randn(2, 4), compile=conveyor.compile)
    assert counts == {"make_fx": 2, "functional runs": 1}  # capture, and the functional trace
    counts.clear()
    check(f, torch.randn(2, 4), torch.randn(2, 4, requires_grad=True), compile=conveyor.compile)
    assert counts == {"make_fx": 3, "functional runs": 1}  # and the joint trace


def test_a_record_keeps_the_analysis_read_from_a_run_made_elsewhere() -> None:
    """``Program.analysis_from`` (Note [One functional run]): the facts of
    a trace's functional run of the program, on its stand-ins, are the
    record's own analysis, kept, and read only by a stage that declares it."""
    request = request_of(_in_place, torch.randn(2, 2), torch.randn(2, 2))
    program = request.program.seen_by("reader", ("analysis",))
    assert not program.holds("analysis") and not program.holds("meta")
    found: list[Any] = []

    def traced(*args: Any) -> tuple[Any, ...]:
        found.append(program.analysis_from(run_functional(request.graph, args)))
        return ()

    conveyor.retrace(traced, request.inputs, request.fake_mode)
    assert program.holds("analysis") and program.holds("meta") and program.analysis is found[0]
    assert found[0].meta == Program(request.graph, request.inputs, request.fake_mode).meta
    assert program.analysis_from(found[0].run) is found[0]  # held: not read again
    with pytest.raises(StageError, match="'blind': reads program part 'analysis'"):
        request.program.seen_by("blind", ("meta",)).analysis_from(found[0].run)
    with pytest.raises(ValueError, match="no program part 'graph'"):
        program.holds("graph")


class _Needs:
    def lower(self, request: Request, options: Any) -> Lowering:
        return Lowering.passthrough(request)


@hookimpl
def conveyor_register_stages(register: Callable[[StageSpec], None]) -> None:
    register(StageSpec(name="needs_other", kind="wrapper", impl=_Needs(), requires=("other",)))
    register(StageSpec(name="other", kind="wrapper", impl=_Needs()))


def test_a_missing_requirement_fails_when_the_pipeline_is_built() -> None:
    plugins = Plugins()
    plugins.register(__import__(__name__, fromlist=["_"]), name="needs")
    conveyor.Pipeline(conveyor.resolve({"autoload": False}), plugins)  # both enabled: fine
    with pytest.raises(ConfigError, match=r"stage 'needs_other' requires \['other'\], which are disabled: enable \['other'\] or disable 'needs_other'"):
        conveyor.Pipeline(conveyor.resolve({"autoload": False, "disable": ["other"]}), plugins)


def test_declarations_name_known_record_parts() -> None:
    with pytest.raises(ValueError, match=r"reads unknown program record part\(s\) \['facts'\]"):
        StageSpec(name="s", kind="wrapper", impl=_Needs(), reads=("facts",))
    with pytest.raises(ValueError, match="cannot require itself"):
        StageSpec(name="s", kind="wrapper", impl=_Needs(), requires=("s",))
    assert Program.__dataclass_params__.frozen  # type: ignore[attr-defined]


def test_an_unsafe_view_output_beside_its_base_is_not_taken_for_functional() -> None:
    def f(x, y):
        a = torch.ops.aten.mm.default(x, y)
        return a, torch.ops.aten._unsafe_view.default(a, [4])

    program = request_of(f, torch.randn(2, 2), torch.randn(2, 2)).program
    assert not program.writing_nodes and not program.outputs_computed


class _Reader:
    """A wrapper stage that reads ``part`` of the record, then passes the request on."""

    def __init__(self, part: str | None, seen: list[Any]) -> None:
        self.part, self.seen = part, seen

    def lower(self, request: Request, options: Any) -> Lowering:
        self.seen.append(request.program.graph)  # the record's fields need no declaration
        if self.part is not None:
            self.seen.append(getattr(request.program, self.part))
        return Lowering.passthrough(request.replace(label=request.label))


def test_reading_an_undeclared_part_fails_naming_the_stage_and_the_part() -> None:
    seen: list[Any] = []
    pipeline = pipeline_of(StageSpec(name="peek", kind="wrapper", impl=_Reader("meta", seen), reads=("aliasing",)))
    request = request_of(_in_place, torch.randn(2), torch.randn(2))
    with pytest.raises(StageError, match=r"conveyor stage 'peek': reads program part 'meta' it does not declare in StageSpec.reads"):
        pipeline.compile(request)
    assert seen == [request.graph]
    assert "analysis" not in request.program.__dict__  # refused before anything ran


def test_a_declared_part_is_read_once_and_kept_for_the_next_stage() -> None:
    """``first`` reads the record and hands on its request under a new label
    (the record kept): ``second``, which declares other parts, reads the same
    record through its own view, not ``first``'s."""
    seen: list[Any] = []
    pipeline = pipeline_of(
        StageSpec(name="first", kind="wrapper", impl=_Reader("meta", seen), reads=("meta",)),
        StageSpec(name="second", kind="wrapper", impl=_Reader("analysis", seen), after=("first",), reads=("analysis",)),
    )
    request = request_of(_in_place, torch.randn(2), torch.randn(2))
    pipeline.compile(request)
    graph, meta, graph_again, analysis = seen
    assert graph is graph_again is request.graph
    assert analysis is request.program.analysis and meta is analysis.meta  # one record, analysed once
    with pytest.raises(StageError, match="'first': reads program part 'aliasing'"):
        _ = request.program.seen_by("first", ("meta",)).aliasing


def test_a_stage_that_reads_nothing_sees_no_part() -> None:
    pipeline = pipeline_of(StageSpec(name="blind", kind="wrapper", impl=_Reader("statically_functional", [])))
    with pytest.raises(StageError, match="'blind': reads program part 'statically_functional'"):
        pipeline.compile(request_of(_in_place, torch.randn(2), torch.randn(2)))


def test_a_wrapper_of_the_run_stage_hook_sees_the_whole_record() -> None:
    found: list[Any] = []

    class Checker:
        @hookimpl(wrapper=True)
        def conveyor_run_stage(self, stage: StageSpec, request: Request, options: Any) -> Any:
            found.append(request.program.writing_nodes)  # no stage declares it
            return (yield)

    seen: list[Any] = []
    pipeline = pipeline_of(StageSpec(name="peek", kind="wrapper", impl=_Reader(None, seen)), plugins=[Checker()])
    request = request_of(_in_place, torch.randn(2), torch.randn(2))
    pipeline.compile(request)
    assert len(found) == 2 and found[0] is found[1] and found[0]  # peek's request and the backend's: one record


def test_the_shipped_stages_read_only_what_they_declare(counts: Counter[str]) -> None:
    """Programs that make ``synthetic_base`` and ``functionalize`` read the
    record, through the installed stages with the check on."""

    def aliased(a, b):
        a.add_(1)
        b.mul_(2)
        return a.t(), b

    base = torch.randn(6)
    check(aliased, base[:4].view(2, 2), base[2:], compile=conveyor.compile)
    check(_in_place, torch.randn(2), torch.randn(2), compile=conveyor.compile)
    with torch.no_grad():
        check(_mlp_step, torch.randn(4, 4), torch.randn(3, 4), compile=conveyor.compile)
    # aliased's record is analysed; _in_place's is read from functionalize's trace
    # (Note [One functional run]), with the declaration checked all the same
    assert counts["analysis"] >= 1 and counts["functional runs"] >= 3
