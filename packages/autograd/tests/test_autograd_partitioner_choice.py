"""The ``partitioner`` option's default, ``"auto"``: ``save_eager`` for a
backend that calls each op on its own (eager), ``min_cut`` for one that fuses
pointwise ops (Note [The partitioner for the backend] in ``stage.py``)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import conveyor
import pytest
import torch
from autograd_helpers import FULL
from conveyor import Plugins, StageSpec, hookimpl
from conveyor.protocol.backends.eager import EagerBackend
from conveyor.testing import check


class _FusingEager:
    """The eager backend, declared as fusing pointwise ops."""

    @hookimpl
    def conveyor_register_stages(self, register: Callable[[StageSpec], None]) -> None:
        register(StageSpec(name="fusing", kind="backend", impl=EagerBackend(), after=FULL, fuses_pointwise=True))


def _compile(backend: str, **autograd: Any) -> Callable[[Any], Any]:
    plugins = Plugins()
    plugins.load_entry_points(allow=FULL)
    plugins.register(_FusingEager(), name="fusing")
    return lambda f: conveyor.compile(f, plugins=plugins, backend=backend, stages={"autograd": autograd})


def chain(x):
    return torch.nn.functional.gelu(x.sin()) + x


def _saved(compiled: Any) -> int:
    """How many values the partitioned forward hands the backward (its
    outputs beyond the program's one)."""
    (gm,) = [g.graph for g in conveyor.last_graphs(compiled) if (g.stage, g.label, g.step) == ("autograd", "forward", "")]
    (output,) = [n for n in gm.graph.nodes if n.op == "output"]
    return len(output.args[0]) - 1


def _partitioned_by(backend: str, **autograd: Any) -> int:
    checked = check(chain, torch.randn(8, 8, requires_grad=True), compile=_compile(backend, **autograd))
    return _saved(checked.compiled)


@pytest.fixture(scope="module")
def explicit() -> dict[str, int]:
    """What each partitioner saves when named, on the eager backend."""
    counts = {name: _partitioned_by("eager", partitioner=name) for name in ("min_cut", "save_eager")}
    assert counts["min_cut"] < counts["save_eager"]  # min_cut recomputes sin and gelu; the test needs them to differ
    return counts


@pytest.mark.parametrize("backend, chosen", [("eager", "save_eager"), ("fusing", "min_cut")])
def test_the_default_follows_the_backend(explicit: dict[str, int], backend: str, chosen: str) -> None:
    assert _partitioned_by(backend) == _partitioned_by(backend, partitioner="auto") == explicit[chosen]


@pytest.mark.parametrize("backend, named", [("eager", "min_cut"), ("fusing", "save_eager")])
def test_a_named_partitioner_wins(explicit: dict[str, int], backend: str, named: str) -> None:
    assert _partitioned_by(backend, partitioner=named) == explicit[named]


def test_the_shipped_fusing_backends_declare_it() -> None:
    plugins = Plugins()
    plugins.load_entry_points()
    stages = plugins.stages()
    for name in ("triton", "inductor"):
        if name in stages:
            assert stages[name].spec.fuses_pointwise, name
    assert not stages["eager"].spec.fuses_pointwise
