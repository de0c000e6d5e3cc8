"""The catalogue ``autograd_function_programs`` (custom Functions modelled on
PyTorch's dynamo tests) through ``conveyor.compile`` and
``torch.compile(backend="conveyor")``, against eager: values, gradients, and
the Python side effects of the backwards, once per backward (core Note [A
Function's backward at run time])."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any

import conveyor
import pytest
import torch
from conveyor.testing import check

sys.path.insert(0, str(Path(__file__).parent))
import autograd_function_programs as catalogue  # noqa: E402
from zoo_harness import fresh_dynamo  # noqa: E402,F401  (autouse)

ENTRY_POINTS = {"conveyor": conveyor.compile, "dynamo": lambda fn: torch.compile(fn, backend="conveyor")}


def _cases() -> list[Any]:
    cases = []
    for program in catalogue.PROGRAMS:
        for entry in ENTRY_POINTS:
            reason = program.xfail.get(entry)
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            cases.append(pytest.param(program, entry, marks=marks, id=f"{program.name}-{entry}"))
    return cases


@pytest.mark.parametrize(("program", "entry"), _cases())
def test_a_custom_function_program_runs_as_in_eager(program: catalogue.Program, entry: str) -> None:
    torch.manual_seed(0)
    args = program.inputs()
    catalogue.LOG.clear()
    with warnings.catch_warnings():
        if entry == "conveyor" and not program.fallback:
            warnings.simplefilter("error", UserWarning)  # one node, no eager fallback
        warnings.filterwarnings("ignore", "The .grad attribute of a Tensor that is not a leaf")
        compiled = ENTRY_POINTS[entry](program.fn)
        check(program.fn, *args, compile=lambda _: compiled)
        # the backwards' side effects: eager's, then the compiled program's, the same
        half = len(catalogue.LOG) // 2
        assert catalogue.LOG[:half] == catalogue.LOG[half:], catalogue.LOG
        # which inputs get a gradient at all (the checker compares a None .grad with zeros)
        assert _grad_is_none(compiled, args) == _grad_is_none(program.fn, args)


def _grad_is_none(fn: Any, args: tuple[Any, ...]) -> list[bool]:
    leaves = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
    outs = fn(*leaves)
    outs = outs if isinstance(outs, (tuple, list)) else (outs,)
    sum(o.sum() for o in outs if isinstance(o, torch.Tensor) and o.requires_grad).backward()
    return [t.grad is None for t in leaves]
