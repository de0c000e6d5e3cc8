"""Note [Storage offsets of Inductor's inputs]: a mutating custom op on a view
input at a storage offset (h_fuzz2's B19: on torch 2.11 and 2.12 Inductor
read its value from the storage's start). On a torch whose Inductor misplaces
such offsets (probed), the graph runs as it is, with a warning; elsewhere it
compiles. Both match eager."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import conveyor
import pytest
import torch
from conveyor_inductor import offsets

NOTE = "Storage offsets of Inductor's inputs"


@torch.library.custom_op("conveyor_inductor_tests::add_one_", mutates_args=("x",))
def add_one_(x: torch.Tensor) -> None:
    x.add_(1)


@add_one_.register_fake
def _(x: torch.Tensor) -> None:
    return None


def custom_write(y: torch.Tensor) -> Any:
    torch.ops.conveyor_inductor_tests.add_one_(y)
    return ()


def _base() -> torch.Tensor:
    return torch.arange(6, dtype=torch.float64).reshape(2, 3)


def _run(compile: Callable[[Any], Any], view: Callable[[torch.Tensor], torch.Tensor]) -> tuple[list[float], list[Any]]:
    base = _base()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compile(custom_write)(view(base))
    return base.flatten().tolist(), [str(w.message) for w in caught]


def _expected(view: Callable[[torch.Tensor], torch.Tensor]) -> list[float]:
    base = _base()
    custom_write(view(base))
    return base.flatten().tolist()


VIEWS = {"x[1:2, 0]": lambda b: b[1:2, 0], "diagonal(-1)": lambda b: b.diagonal(-1), "x[:, 0]": lambda b: b[:, 0]}


# the disk cache off: a program loaded from it does not warn again
def _conveyor(f: Any) -> Any:
    return conveyor.compile(f, backend="inductor", cache=False)


def _dynamo(f: Any) -> Any:
    torch._dynamo.reset()
    return torch.compile(f, backend="conveyor", options={"backend": "inductor", "cache": False})


@pytest.mark.parametrize(
    "entry", [pytest.param(_conveyor, id="conveyor"), pytest.param(_dynamo, id="dynamo", marks=pytest.mark.slow)]
)
def test_a_custom_op_writing_a_view_at_an_offset(entry: Any) -> None:
    """On this torch: compiled where its Inductor is right, else a warned eager run."""
    view = VIEWS["x[1:2, 0]"]
    got, messages = _run(entry, view)
    assert got == _expected(view)
    assert any(NOTE in m for m in messages) == offsets.misplaces_input_offsets()
    # and where it is right, the graph compiles: auto_functionalized is a higher-order op with no subgraph, which
    # Inductor lowers (Note [Higher-order ops in the inductor backend])
    assert any("conveyor: running" in m for m in messages) == offsets.misplaces_input_offsets()


@pytest.mark.parametrize("name", sorted(VIEWS))
def test_on_a_torch_that_misplaces_offsets_the_graph_runs_eagerly(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The fallback itself (no C++ compile: every view here is at an offset but ``x[:, 0]``)."""
    view = VIEWS[name]
    if view(_base()).storage_offset() == 0:
        pytest.skip("compiles: the view starts its storage")
    monkeypatch.setattr(offsets, "misplaces_input_offsets", lambda: True)
    got, messages = _run(_conveyor, view)
    assert got == _expected(view)
    assert any(NOTE in m for m in messages)


def test_the_probe_reads_the_lowering() -> None:
    """The probe lowers without error on this torch (a ``True`` from a failed
    probe would send every such graph to the eager fallback)."""
    assert offsets._probe_offset() in (0, -3)
