"""An ``out=`` tensor that shares some but not all of its memory with an
input: eager refuses the call; compiled, the program runs eagerly with a
warning and raises eager's error (core Note [out= overlapping an input]),
through ``conveyor.compile`` and ``torch.compile(backend="conveyor")``. An
``out=`` that is the input itself, or a part of the same storage no input
reaches, compiles as before."""

from __future__ import annotations

import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import conveyor
import pytest
import torch
from conveyor.testing import check

sys.path.insert(0, str(Path(__file__).parent))
from zoo_harness import fresh_dynamo  # noqa: E402,F401  (autouse)

ENTRY_POINTS = {"conveyor": conveyor.compile, "dynamo": lambda fn: torch.compile(fn, backend="conveyor")}


def add_sub_alpha_out(inp: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    torch.add(inp, 1, alpha=2, out=out)
    return torch.sub(out, inp, alpha=0.4, out=out.view(4, 6))


def shifted_out(x: torch.Tensor) -> torch.Tensor:
    return torch.mul(x[:-1], 2, out=x[1:])


def transposed_out(x: torch.Tensor) -> torch.Tensor:
    return torch.add(x, 1, out=x.t())


def same_out(x: torch.Tensor) -> torch.Tensor:
    return torch.add(x, 1, out=x)


def disjoint_out(x: torch.Tensor) -> torch.Tensor:
    return torch.mul(x[:2], 3, out=x[2:])


REFUSED: dict[str, tuple[Callable[..., Any], Callable[[], tuple[torch.Tensor, ...]]]] = {
    "add_sub_alpha_out": (add_sub_alpha_out, lambda: (torch.randn(2, 3, 4), torch.zeros(2, 3, 4))),
    "shifted_out": (shifted_out, lambda: (torch.randn(5),)),
    "transposed_out": (transposed_out, lambda: (torch.randn(3, 3),)),
}
ALLOWED: dict[str, tuple[Callable[..., Any], Callable[[], tuple[torch.Tensor, ...]]]] = {
    "same_out": (same_out, lambda: (torch.randn(3, 4),)),
    "disjoint_out": (disjoint_out, lambda: (torch.randn(4, 3),)),
}


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
@pytest.mark.parametrize("name", list(REFUSED))
def test_an_out_overlapping_an_input_raises_as_eager(name: str, entry: str) -> None:
    fn, inputs = REFUSED[name]
    with pytest.raises(RuntimeError, match="refer to a single memory location"):
        fn(*inputs())
    compiled = ENTRY_POINTS[entry](fn)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        checked = check(fn, *inputs(), compile=lambda _: compiled)
    assert isinstance(checked.compiled_out, RuntimeError) and "single memory location" in str(checked.compiled_out)
    if entry == "conveyor":  # behind dynamo, dynamo runs such a call eagerly itself
        assert any("out= overlapping an input" in str(w.message) for w in caught), [str(w.message) for w in caught]


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
@pytest.mark.parametrize("name", list(ALLOWED))
def test_an_out_that_is_its_input_or_apart_compiles(name: str, entry: str) -> None:
    fn, inputs = ALLOWED[name]
    compiled = ENTRY_POINTS[entry](fn)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no eager fallback
        check(fn, *inputs(), compile=lambda _: compiled)
