"""The full-pipeline aliasing fuzzer's random programs (random views of one
base, passed in random subsets, under random in-place and metadata ops, with
and without grad) through the Inductor backend, on both entry points, against
eager PyTorch.

The strategies are the ones of ``packages/synthetic_base/tests/
test_synthetic_base_hypothesis.py`` (imported, not copied); that module runs
them through the eager backend. Each example compiles with Inductor, so CI
runs a few derandomized examples per entry; ``--runslow`` runs more, and
``CONVEYOR_FUZZ_EXAMPLES`` (e.g. 500) sets the count of the slow test (the
examples then vary from run to run).
"""

from __future__ import annotations

import importlib.util
import os
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import conveyor
import pytest
import torch
from conveyor.testing import check
from hypothesis import HealthCheck, given, settings

_PATH = Path(__file__).parents[1] / "packages/synthetic_base/tests/test_synthetic_base_hypothesis.py"
_SPEC = importlib.util.spec_from_file_location("_synthetic_base_fuzz_strategies", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
fuzz = importlib.util.module_from_spec(_SPEC)
sys.modules[_SPEC.name] = fuzz  # dynamo imports a traced function's module by name
_SPEC.loader.exec_module(fuzz)


def _dynamo(f: Any) -> Any:
    torch._dynamo.reset()  # past dynamo's recompile limit the rest would run eagerly without a word
    return torch.compile(f, backend="conveyor", options={"backend": "inductor"})


ENTRIES: dict[str, Callable[[Any], Any]] = {
    "conveyor": lambda f: conveyor.compile(f, backend="inductor"),
    "dynamo": _dynamo,
}

LONG = int(os.environ.get("CONVEYOR_FUZZ_EXAMPLES", "0"))
_HEALTH = [HealthCheck.too_slow, HealthCheck.filter_too_much]


def _check(entry: str, example: Any) -> None:
    shape, inputs, ops, requires_grad, return_first = example
    root = torch.randn(shape, dtype=torch.float64, generator=torch.Generator().manual_seed(0))
    if requires_grad:
        root = root.requires_grad_() * 1  # a non-leaf, so views of it may be written as in eager
    with warnings.catch_warnings():
        # writes through an input that overlaps itself run eagerly, with a warning
        warnings.filterwarnings("ignore", message="conveyor: running", category=UserWarning)
        check(fuzz._full_program(ops, return_first), *[v(root) for _, v in inputs], compile=ENTRIES[entry])


@pytest.mark.parametrize("entry", sorted(ENTRIES))
@settings(max_examples=4, deadline=None, suppress_health_check=_HEALTH, derandomize=True, database=None)
@given(example=fuzz.full_programs())
def test_random_aliasing_through_inductor(entry: str, example: Any) -> None:
    _check(entry, example)


@pytest.mark.slow
@pytest.mark.parametrize("entry", sorted(ENTRIES))
@settings(max_examples=LONG or 100, deadline=None, suppress_health_check=_HEALTH, derandomize=not LONG, database=None)
@given(example=fuzz.full_programs())
def test_random_aliasing_through_inductor_many(entry: str, example: Any) -> None:
    _check(entry, example)
