"""A backend's declared facts reach the wrapper stages through their requests
(Note [Facts of the backend] in ``conveyor.protocol.stage``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import conveyor
import pytest
import torch
from conveyor import Lowering, PipelineError, Plugins, Request, StageSpec, hookimpl
from conveyor.protocol.backends.eager import EagerBackend
from conveyor.testing.pytest_plugin import pipeline_of
from torch._subclasses.fake_tensor import FakeTensorMode


def _request(fn: Callable[..., Any], *args: Any) -> Request:
    mode = FakeTensorMode()
    fakes = tuple(mode.from_tensor(a) for a in args)
    return Request(conveyor.retrace(lambda *xs: (fn(*xs),), fakes, mode), fakes, mode)


class _Split:
    """A wrapper that records each request it sees and hands on two: its own
    request under a new label, and one it builds afresh (without the facts)."""

    def __init__(self) -> None:
        self.seen: list[Request] = []

    def lower(self, request: Request, options: Mapping[str, Any]) -> Lowering:
        self.seen.append(request)
        fresh = Request(request.graph, request.inputs, request.fake_mode, request.grad_enabled, label="fresh")
        return Lowering((request.replace(label="own"), fresh), lambda own, _fresh: own)


class _Inner:
    def __init__(self) -> None:
        self.seen: list[Request] = []

    def lower(self, request: Request, options: Mapping[str, Any]) -> Lowering:
        self.seen.append(request)
        return Lowering.passthrough(request)


@pytest.mark.parametrize("backend, fuses", [("eager", False), ("fusing", True)])
def test_every_request_a_stage_receives_carries_the_backend_s_fact(backend: str, fuses: bool) -> None:
    split, inner = _Split(), _Inner()
    pipeline = pipeline_of(
        StageSpec(name="split", kind="wrapper", impl=split),
        StageSpec(name="inner", kind="wrapper", impl=inner, after=("split",)),
        StageSpec(name="fusing", kind="backend", impl=EagerBackend(), fuses_pointwise=True),
        backend=backend,
    )
    assert pipeline.backend.fuses_pointwise is fuses
    request = _request(lambda x: x.sin() + 1, torch.randn(3))
    compiled, _ = pipeline.compile(request)
    assert [r.backend_fuses_pointwise for r in split.seen] == [fuses]
    assert [(r.label, r.backend_fuses_pointwise) for r in inner.seen] == [("own", fuses), ("fresh", fuses)]
    x = torch.randn(3)
    torch.testing.assert_close(compiled([x])[0], x.sin() + 1)


def test_the_fact_does_not_change_the_program_record() -> None:
    request = _request(lambda x: x * 2, torch.randn(3))
    record = request.program
    assert request.replace(backend_fuses_pointwise=True).program is record
    assert request.replace(label="other", backend_fuses_pointwise=True).program is record


def test_only_a_backend_declares_that_it_fuses() -> None:
    with pytest.raises(ValueError, match=r"stage 'wrapping': only a backend can declare fuses_pointwise"):
        StageSpec(name="wrapping", kind="wrapper", impl=_Inner(), fuses_pointwise=True)


def test_a_wrapper_that_declares_it_fails_when_the_pipeline_is_built() -> None:
    class Stages:
        @hookimpl
        def conveyor_register_stages(self, register: Callable[[StageSpec], None]) -> None:
            register(StageSpec(name="wrapping", kind="wrapper", impl=_Inner(), fuses_pointwise=True))

    plugins = Plugins()
    plugins.register(Stages(), name="declares")
    with pytest.raises(PipelineError, match=r"plugin 'declares'.*only a backend can declare fuses_pointwise"):
        conveyor.Pipeline(conveyor.resolve({"autoload": False}), plugins)


def test_the_shipped_eager_backend_does_not_fuse() -> None:
    assert conveyor.Pipeline(conveyor.resolve({"autoload": False})).backend.fuses_pointwise is False
