"""The stage reads the core's program record (``request.program``), and a
program the record knows to be functional passes through untraced
(Note [Nothing to functionalize])."""

from __future__ import annotations

from typing import Any

import conveyor
import pytest
import torch
from conveyor import Request
from conveyor.stage_api import Program
from conveyor.testing import check
from conveyor_functionalize.layout import FunctionalLayout
from conveyor_functionalize.one_run import in_one_run
from conveyor_functionalize.trace import trace_functional
from functionalize_catalogue import CASES, Case
from test_functionalize_catalogue import compile_eager
from torch._subclasses.fake_tensor import FakeTensorMode


def _request(case: Case, requires_grad: bool) -> Request:
    mode = FakeTensorMode()
    with torch.enable_grad():
        real = case.inputs(case.leaves(requires_grad))
    fakes = tuple(mode.from_tensor(t) for t in real)
    return Request(conveyor.retrace(lambda *xs: tuple(_as_tuple(case.fn(*xs))), fakes, mode), fakes, mode)


def _as_tuple(out: Any) -> tuple[Any, ...]:
    return tuple(out) if isinstance(out, (tuple, list)) else (out,)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_static_facts_are_sound_on_the_catalogue(case: Case) -> None:
    """Never functional by the graph where the functional run finds a
    mutation or an aliased output; and a case that mutates is never
    taken for functional."""
    program = _request(case, False).program
    if program.statically_functional:
        assert program.meta.is_functional, case.name
    if case.mutated:
        assert not program.statically_functional and program.meta.mutated_inputs


def _functional(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    z = torch.nn.functional.gelu(x @ y)
    return z.sum(0), (z + 1).t()  # a fresh value and the lone view of an intermediate


@pytest.mark.parametrize("requires_grad", [False, True])
def test_a_functional_program_passes_through_untraced(requires_grad: bool) -> None:
    x, y = torch.randn(3, 4, requires_grad=requires_grad), torch.randn(4, 4)
    compiled = compile_eager(_functional)
    check(_functional, x, y, compile=lambda f: compiled)
    graphs = {g.stage: g.graph for g in conveyor.last_graphs(compiled) if not g.step}
    assert graphs["functionalize"] is graphs["capture"]  # the same graph object: no trace


def test_a_program_returning_a_view_of_its_input_is_still_functionalized() -> None:
    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x.t(), x * 2

    compiled = compile_eager(f)
    check(f, torch.randn(2, 3), compile=lambda _: compiled)
    graphs = {g.stage: g.graph for g in conveyor.last_graphs(compiled) if not g.step}
    assert graphs["functionalize"] is not graphs["capture"]


@pytest.mark.parametrize("requires_grad", [False, True])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_the_facts_read_from_the_stages_trace_are_the_records(case: Case, requires_grad: bool) -> None:
    """Note [One functional run]: where the stage reads the program's facts
    from its own trace, they are what the record's separate run finds."""
    try:
        request = _request(case, requires_grad)
    except RuntimeError:  # eager refuses it too (an in-place op on a leaf that requires grad)
        pytest.skip("capture raises")
    if not in_one_run(request):
        pytest.skip("analysed before the trace")
    record = Program(request.graph, request.inputs, request.fake_mode)
    found: list[Any] = []

    def layout_of(run: Any, kept_identity: bool) -> FunctionalLayout:
        assert not kept_identity
        found.append(record.analysis_from(run))
        return FunctionalLayout.of(found[0].meta)

    try:
        with torch.set_grad_enabled(request.grad_enabled):
            trace_functional(request.graph, request.inputs, request.fake_mode, layout_of)
    except Exception:  # the stage lowers as before (its own error): nothing to compare
        pytest.skip("the trace raises")
    assert found[0].meta == request.program.meta
