"""PyTorch's Inductor and functionalization test programs through conveyor
(``torchinductor_programs.py``), checked against eager by ``conveyor.testing.check``
on both entry points (``conveyor.compile``, ``torch.compile(backend="conveyor")``).

Default run: a representative set of mutation / view / indexing programs with the
eager backend (with and without grad) and one through the inductor backend.
Slow (``--runslow``): every program, both entries, eager and inductor backends.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import torchinductor_programs as tp  # noqa: E402

#: programs whose grad variant is not checked, and why
NO_GRAD = {
    # eager's own derivative is wrong (tests/opinfo_pipeline_sweep.py's DEVIATIONS)
    "as_strided_scatter_self_overlap_free": "torch's as_strided_scatter derivative is wrong; conveyor's passes gradcheck",
}

#: programs whose backward eager runs only to raise in it: conveyor (like
#: torch.compile(backend="aot_eager")) raises the same error when it compiles, at the call

REPRESENTATIVE = [
    "add_inplace_permuted",
    "slice_mutation1",
    "index_put3",
    "scatter_add_inplace_view",
    "functionalization_everything",
    "functionalization_view_inplace",
    "as_strided_inplace_input",
    "regression_addcmul_inplace_value",
    "regression_exact_stride",
]


def _grads(name: str) -> list[bool]:
    return [False, True] if tp.has_float_input(name) and name not in NO_GRAD else [False]


def _cases(names: list[str]) -> list[Any]:
    return [pytest.param(n, g, id=f"{n}-{'grad' if g else 'nograd'}") for n in names for g in _grads(n)]


def _run(name: str, entry: str, backend: str, grad: bool) -> None:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="conveyor: running", category=UserWarning)
        tp.run(name, entry, backend, grad)


@pytest.mark.parametrize("entry", ["conveyor", "dynamo"])
@pytest.mark.parametrize(("name", "grad"), _cases(REPRESENTATIVE))
def test_representative_program(name: str, grad: bool, entry: str) -> None:
    _run(name, entry, "eager", grad)


def test_representative_program_through_inductor() -> None:
    _run("slice_mutation3", "conveyor", "inductor", True)


def test_dynamo_addcdiv_with_value_keeps_the_gradient() -> None:
    """Dynamo spells ``addcdiv_(.., value=)`` as ``prims.fma`` + ``copy_``: the
    custom op's result written into the input kept no gradient (fixed in cd52d2a)."""
    _run("regression_addcdiv_inplace_value", "dynamo", "eager", True)


#: programs conveyor.compile gets wrong (silently) and torch.compile(backend="conveyor") gets right
CONVEYOR_ENTRY_WRONG = {
    "functions_type_check": "capture runs the program's Python on FakeTensors: type(x) is not torch.Tensor",
    "functions_is_fx_tracing": "make_fx's tracing flag is set while capture runs the program: is_fx_tracing() is True",
}
#: were wrong or crashed on the conveyor.compile entry, now right there: a torch.Size kept one while capture
#: swaps real tensors; .numpy() and deepcopy compiled through dynamo (Note [Calls only dynamo can trace])
CONVEYOR_ENTRY_FIXED = ("functions_tensor_new_with_size", "repros_deepcopy_submodule_in_forward", "repros_numpy_in_program")


@pytest.mark.parametrize("entry", ["conveyor", "dynamo"])
@pytest.mark.parametrize("name", sorted([*CONVEYOR_ENTRY_WRONG, *CONVEYOR_ENTRY_FIXED]))
def test_program_reading_python_state(name: str, entry: str, request: pytest.FixtureRequest) -> None:
    if entry == "conveyor" and name in CONVEYOR_ENTRY_WRONG:
        request.applymarker(pytest.mark.xfail(strict=True, reason=CONVEYOR_ENTRY_WRONG[name]))
    _run(name, entry, "eager", False)


def test_programs_are_many_and_named_once() -> None:
    assert len(tp.PROGRAMS) >= 150
    assert set(REPRESENTATIVE) <= set(tp.PROGRAMS)
    assert set(NO_GRAD) | set(CONVEYOR_ENTRY_WRONG) <= set(tp.PROGRAMS)


#: Note [Layouts in the inductor backend]: where torch's Inductor does not honour
#: user_visible_output_idxs, a graph whose outputs it would lay out otherwise is a
#: documented, loud refusal (a StageError saying so), not a wrong result
_LAYOUT_REFUSAL = "does not honour user_visible_output_idxs"


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["eager", "inductor"])
@pytest.mark.parametrize("entry", ["conveyor", "dynamo"])
@pytest.mark.parametrize(("name", "grad"), _cases(sorted(tp.PROGRAMS)))
def test_every_program(name: str, grad: bool, entry: str, backend: str, request: pytest.FixtureRequest) -> None:
    if entry == "conveyor" and name in CONVEYOR_ENTRY_WRONG:
        request.applymarker(pytest.mark.xfail(strict=True, reason=CONVEYOR_ENTRY_WRONG[name]))
    try:
        _run(name, entry, backend, grad)
    except Exception as exc:
        if backend == "inductor" and _LAYOUT_REFUSAL in str(exc):
            pytest.skip(f"documented refusal: {str(exc).splitlines()[0][:200]}")
        raise
