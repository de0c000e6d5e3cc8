"""Note [Writes hidden from autograd to a saved tensor]: a ``.data`` write of a
tensor an earlier op saved for its backward runs eagerly, with a warning, and
its gradient is eager's (h_fuzz2's B15: silently the old value's before)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import conveyor
import pytest
import torch
from conveyor.testing import check

f64 = torch.float64
NOTE = "Writes hidden from autograd to a saved tensor"


def data_write_of_saved(x):
    y = x * x
    x.data.add_(1)
    return y


def data_write_of_saved_view(x):
    y = x.sin()
    x.data[1:].mul_(3)
    return y * 2


def data_write_of_saved_intermediate(x):
    h = x * 2
    y = h * h
    h.data.zero_()
    return y


def _dynamo(f: Any) -> Any:
    torch._dynamo.reset()
    return torch.compile(f, backend="conveyor")


ENTRIES: dict[str, Callable[[Any], Any]] = {"conveyor": conveyor.compile, "dynamo": _dynamo}
PROGRAMS = [data_write_of_saved, data_write_of_saved_view, data_write_of_saved_intermediate]


@pytest.mark.parametrize("entry", sorted(ENTRIES))
@pytest.mark.parametrize("program", PROGRAMS, ids=[p.__name__ for p in PROGRAMS])
def test_a_data_write_of_a_saved_tensor_runs_eagerly(program: Any, entry: str) -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        check(program, torch.tensor([1.0, 2.0, 3.0], dtype=f64, requires_grad=True) * 1, compile=ENTRIES[entry])
    assert any(NOTE in str(w.message) for w in caught)


def test_the_gradient_reads_the_written_value() -> None:
    """The case the fuzzer found: eager's gradient is ``2 * (x + 1)``."""
    leaf = torch.tensor([1.0, 2.0], dtype=f64, requires_grad=True)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="conveyor: running", category=UserWarning)
        conveyor.compile(data_write_of_saved)(leaf * 1).sum().backward()
    assert leaf.grad is not None and leaf.grad.tolist() == [4.0, 6.0]


def data_write_before_use(x):
    x.data.add_(1)
    return x * x


def data_write_of_unread(x, w):
    y = x * 2
    w.data.add_(1)
    return y, w * 1


@pytest.mark.parametrize(
    ("program", "make"),
    [
        (data_write_before_use, lambda: [torch.ones(3, dtype=f64, requires_grad=True) * 1]),
        (data_write_of_unread, lambda: [torch.ones(3, dtype=f64, requires_grad=True), torch.ones(3, dtype=f64)]),
    ],
    ids=["write_before_use", "write_of_unread"],
)
def test_other_data_writes_compile(program: Any, make: Any) -> None:
    """A ``.data`` write no earlier grad-mode op read compiles as before."""
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="conveyor: running", category=UserWarning)
        check(program, *make(), compile=conveyor.compile)
