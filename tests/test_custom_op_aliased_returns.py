"""Note [Custom ops that return what they mutate]: a custom op whose result is
an argument it writes (``Tensor(a!)`` return) hands back that argument, as in
eager, under both entries (h_sweep5 B2, B3)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import conveyor
import pytest
import torch
from conveyor.testing import check

if not (hasattr(torch.Tag, "inplace") and hasattr(torch.Tag, "out")):
    pytest.skip("this torch's custom ops have no inplace or out tag (torch 2.11)", allow_module_level=True)


@torch.library.custom_op("conveyor_core_test::tagged_add_", mutates_args={"x"}, tags=torch.Tag.inplace)
def _add_(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x.add_(y)
    return x


@torch.library.custom_op("conveyor_core_test::tagged_add_out", mutates_args={"out"}, tags=torch.Tag.out)
def _add_out(x: torch.Tensor, y: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
    out.copy_(x + y)
    return out


@torch.library.custom_op("conveyor_core_test::tagged_two_out", mutates_args={"a", "b"}, tags=torch.Tag.out)
def _two_out(x: torch.Tensor, *, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    a.copy_(x + 1)
    b.copy_(x * 2)
    return a, b


def _dynamo(fn: Any) -> Any:
    torch._dynamo.reset()
    return torch.compile(fn, backend="conveyor")


ENTRIES: dict[str, Callable[[Any], Any]] = {"conveyor": conveyor.compile, "dynamo": _dynamo}


def result_written_again(x, y):
    r = _add_(x, y)
    r.mul_(2)
    return x.sum()


def result_returned(x, y):
    return _add_(x, y)


def out_written_again(x, y, out):
    r = _add_out(x, y, out=out)
    r.mul_(2)
    return out + 0


def out_returned(x, y, out):
    return _add_out(x, y, out=out)


def two_outs_returned(x, a, b):
    r, s = _two_out(x, a=a, b=b)
    s.add_(1)
    return r, s


CASES: dict[str, tuple[Callable[..., Any], Callable[[], list[torch.Tensor]]]] = {
    "result_written_again": (result_written_again, lambda: [torch.zeros(3), torch.ones(3)]),
    "result_returned": (result_returned, lambda: [torch.zeros(3), torch.ones(3)]),
    "out_written_again": (out_written_again, lambda: [torch.zeros(3), torch.ones(3), torch.zeros(3)]),
    "out_returned": (out_returned, lambda: [torch.zeros(3), torch.ones(3), torch.zeros(3)]),
    "two_outs_returned": (two_outs_returned, lambda: [torch.randn(3), torch.zeros(3), torch.zeros(3)]),
}


@pytest.mark.parametrize("entry", sorted(ENTRIES))
@pytest.mark.parametrize("name", sorted(CASES))
def test_a_custom_op_result_is_its_mutated_argument(name: str, entry: str) -> None:
    fn, make_inputs = CASES[name]
    check(fn, *make_inputs(), compile=ENTRIES[entry])
