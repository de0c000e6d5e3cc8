"""The public analysis API other stages rely on: ``analyze`` and its dataclasses."""

from __future__ import annotations

import pytest
import torch
from conveyor.frontend.capture import trace_user
from conveyor_functionalize import InputInfo, OutputInfo, OutputKind, ProgramMeta, analyze
from conveyor_functionalize.layout import FunctionalLayout
from conveyor_functionalize.trace import trace_functional
from torch._subclasses.fake_tensor import FakeTensorMode


def meta_of(fn, *tensors: torch.Tensor) -> ProgramMeta:
    fake_mode = FakeTensorMode()
    fakes = [fake_mode.from_tensor(t, static_shapes=True) for t in tensors]
    return analyze(trace_user(fn, fakes, fake_mode).graph, fakes, fake_mode)


def test_input_mutation_kinds() -> None:
    def f(data, meta, running, storage, other, untouched):
        data[0].mul_(2)
        meta.t_()
        with torch.no_grad():
            running.add_(1)
        storage.set_(other)
        return (untouched + 1,)

    m = meta_of(f, torch.randn(3, 3), torch.randn(2, 3), torch.randn(3), torch.randn(4), torch.randn(2), torch.randn(2))
    data, meta, running, storage, other, untouched = m.inputs
    assert data.mutates_data and not data.mutates_metadata and not data.mutations_under_no_grad
    assert meta.mutates_metadata and not meta.mutates_data
    assert running.mutates_data and running.mutations_under_no_grad
    assert storage.mutates_storage and storage.mutates_metadata and not storage.mutates_data
    assert storage.swapped_onto == 4
    assert untouched == other == InputInfo()
    assert m.mutated_inputs == (0, 1, 2, 3)
    assert m.data_mutated_inputs == (0, 2)
    assert m.metadata_mutated_inputs == (1, 3)


def test_requires_grad_and_leafness() -> None:
    m = meta_of(lambda a, b: (a + b,), torch.randn(2, requires_grad=True), torch.randn(2, requires_grad=True) * 1)
    assert (m.inputs[0].requires_grad, m.inputs[0].is_leaf) == (True, True)
    assert (m.inputs[1].requires_grad, m.inputs[1].is_leaf) == (True, False)
    assert m.is_functional


def test_output_kinds() -> None:
    def f(x, y):
        z = y * 2
        w = y + 1
        return (x, x.t(), z[0], z[1], w, w.view(-1), w, (y * 3)[0], y.exp())

    m = meta_of(f, torch.randn(2, 3), torch.randn(2, 3))
    kinds = [(o.kind, o.index) for o in m.outputs]
    assert kinds == [
        (OutputKind.IS_INPUT, 0),
        (OutputKind.VIEW_OF_INPUT, 0),
        (OutputKind.VIEW_OF_SHARED_INTERMEDIATE, 0),
        (OutputKind.VIEW_OF_SHARED_INTERMEDIATE, 0),
        (OutputKind.FRESH, None),
        (OutputKind.ALIAS_OF_OUTPUT, 4),
        (OutputKind.IS_OUTPUT, 4),
        (OutputKind.VIEW_OF_INTERMEDIATE, None),
        (OutputKind.FRESH, None),
    ]
    assert m.num_intermediate_bases == 1
    assert not m.is_functional


def test_an_output_viewing_a_mutated_input_is_a_view_of_that_input() -> None:
    def f(x):
        x.add_(1)
        return (x.view(-1), x.detach())

    m = meta_of(f, torch.randn(2, 2, requires_grad=True) * 1)
    assert [(o.kind, o.index, o.requires_grad) for o in m.outputs] == [
        (OutputKind.VIEW_OF_INPUT, 0, True),
        (OutputKind.VIEW_OF_INPUT, 0, False),
    ]


def test_analysis_and_trace_leave_the_fake_inputs_alone() -> None:
    def f(x):
        x.unsqueeze_(0)
        x.mul_(2)
        return (x,)

    fake_mode = FakeTensorMode()
    fake = fake_mode.from_tensor(torch.randn(2, 3, requires_grad=True) * 1, static_shapes=True)
    graph = trace_user(f, [fake], fake_mode).graph
    before = (fake.shape, fake.stride(), fake._version, fake.grad_fn, fake.untyped_storage()._cdata)
    meta = analyze(graph, [fake], fake_mode)
    assert meta.inputs[0].mutates_metadata and meta.inputs[0].mutates_data
    layout = FunctionalLayout.of(meta)
    trace_functional(graph, [fake], fake_mode, lambda run, kept: layout)
    assert (fake.shape, fake.stride(), fake._version, fake.grad_fn, fake.untyped_storage()._cdata) == before


@pytest.mark.parametrize(
    "make",
    [
        lambda: InputInfo(mutates_storage=True),
        lambda: InputInfo(mutates_storage=True, mutates_metadata=True, mutates_data=True),
        lambda: InputInfo(swapped_onto=1),
        lambda: OutputInfo(OutputKind.IS_INPUT),
        lambda: OutputInfo(OutputKind.FRESH, 0),
        lambda: OutputInfo(OutputKind.VIEW_OF_INPUT, 0, is_tensor=False),
        lambda: ProgramMeta((), (OutputInfo(OutputKind.VIEW_OF_INPUT, 0),)),
        lambda: ProgramMeta((), (OutputInfo(OutputKind.VIEW_OF_SHARED_INTERMEDIATE, 0),), num_intermediate_bases=2),
        lambda: ProgramMeta((), (OutputInfo(OutputKind.IS_OUTPUT, 0),)),
        lambda: ProgramMeta(
            (InputInfo(),), (OutputInfo(OutputKind.VIEW_OF_INPUT, 0), OutputInfo(OutputKind.ALIAS_OF_OUTPUT, 0))
        ),
    ],
)
def test_metadata_invariants(make) -> None:
    with pytest.raises(ValueError):
        make()


def test_layout_names_the_inner_outputs() -> None:
    def f(x, y, z):
        x.add_(1)
        y.t_()
        b = z * 2
        return (b[0], x.view(-1), z.exp(), b[1])

    layout = FunctionalLayout.of(meta_of(f, torch.randn(2, 2), torch.randn(2, 3), torch.randn(2, 2)))
    # only a data mutation needs a new value: y's metadata change is replayed from constants
    assert layout.updated_inputs == (0,)
    assert layout.computed_outputs == (2,)
    assert layout.intermediate_bases == (0,)  # the base of outputs 0 and 3, found through output 0
    assert (layout.updated_input_slot(0), layout.output_slot(2), layout.base_slot(0)) == (0, 1, 2)
    assert layout.num_outputs == 3
    with pytest.raises(ValueError, match="duplicates"):
        FunctionalLayout((0, 0), (), ())
