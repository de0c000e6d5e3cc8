"""PyTorch's ``test/dynamo/test_ctx_manager.py`` programs (and the global settings it
does not reach) through conveyor: ``ctx_manager_catalogue`` (and ``2``, ``3``), run by
``ctx_manager_harness`` on both entries (``conveyor.compile``,
``torch.compile(backend="conveyor")``), without grad and with grad. Each side calls a
program twice from the same state; outputs, aliasing, inputs, gradients (the checker),
the global settings after each call and which outputs are inference tensors must be
eager's.

Default run: a representative set, the regression cases of this sweep among them;
slow (``--runslow``): every program. A known difference is an xfail naming its cause;
every one below is dynamo's own (``torch.compile(backend="eager")`` and ``aot_eager``
do the same), on the ``torch.compile`` entry only.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import ctx_manager_harness as h  # noqa: E402
from dynamo_repro_programs import with_grad  # noqa: E402

D1 = (
    "dynamo: a context object made before a graph break (torch.set_grad_enabled(True), which sets "
    "grad mode as it is made) is exited to the mode after its construction, not before it; "
    "the caller's no_grad is left on (backend='eager' and aot_eager too)"
)
D2 = (
    "dynamo: torch.no_grad()(fn) / torch.enable_grad()(fn) inside the program raises an internal "
    "AssertionError 'expected a function variable, got LazyVariableTracker' (backend='eager' too)"
)
D4 = (
    "dynamo: a context the caller entered and the program exits, or one the program enters and "
    "leaves open (autocast, inference_mode), raises inside dynamo or leaves the setting as it was "
    "(backend='eager' too; which of the two depends on the torch)"
)

#: (program, entry) -> reason; entry "*" matches both
XFAIL: dict[tuple[str, str], str] = {
    ("inactive_context_graph_break_local[no_grad]", "dynamo"): D1,
    ("inactive_context_graph_break_stack[no_grad]", "dynamo"): D1,
    ("context_wrapping_grad_mode_decorator[grad]", "dynamo"): D2,
    ("context_wrapping_grad_mode_decorator[no_grad]", "dynamo"): D2,
    ("autocast_entered_outside_exited_inside", "dynamo"): D4,
    ("autocast_left_open", "dynamo"): D4,
    ("inference_mode_left_open", "dynamo"): D4,
}
#: differ between torch versions (xfail, not strict)
NOT_STRICT = {("inference_mode_left_open", "dynamo")}

#: (program, with grad): the default run's cases, both entries
REPRESENTATIVE = [
    ("no_grad_fn3[no_grad]", True),
    ("grad_mode_guard[grad]", False),
    ("nested_grad_mode_graph_break[no_grad]", False),
    ("autocast_arguments_binding[autocast]", True),  # regression: core Note [The graph runs below autocast]
    ("nested_generic_context_manager_customized_ctx_manager[grad]", False),
    ("disable_saved_tensors_hooks", True),
    ("ctx_basic0", False),  # regression: core Note [Factory calls under a default dtype the program set]
    ("set_default_dtype_changed_and_restored", False),
    ("set_default_device_left_changed", False),  # regression: the default device in modes_kept._SWITCHES
    ("inference_mode_output", False),  # regression: core Note [Outputs made in another inference mode]
    ("inference_mode_disabled_inside", False),
    ("no_grad_entered_outside_exited_inside", False),
]


def _grads(name: str) -> list[bool]:
    return [False, True] if with_grad(h.PROGRAMS[name].make()) is not None else [False]


def _case(name: str, grad: bool) -> object:
    return pytest.param(name, grad, id=f"{name}-{'grad' if grad else 'nograd'}")


def _run(name: str, entry: str, grad: bool, request: pytest.FixtureRequest) -> None:
    reason = XFAIL.get((name, entry)) or XFAIL.get((name, "*"))
    if reason:
        strict = (name, entry) not in NOT_STRICT
        request.applymarker(pytest.mark.xfail(strict=strict, reason=reason))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=UserWarning)
        warnings.filterwarnings("ignore", category=FutureWarning)
        h.run(name, entry, grad)


@pytest.mark.parametrize("entry", ["conveyor", "dynamo"])
@pytest.mark.parametrize(("name", "grad"), [_case(n, g) for n, g in REPRESENTATIVE])
def test_representative_ctx_program(name: str, grad: bool, entry: str, request: pytest.FixtureRequest) -> None:
    _run(name, entry, grad, request)


def test_programs_are_named_once() -> None:
    assert len(h.PROGRAMS) >= 80
    assert {n for n, _ in REPRESENTATIVE} <= set(h.PROGRAMS)
    assert {k[0] for k in XFAIL} <= set(h.PROGRAMS)


@pytest.mark.slow
@pytest.mark.parametrize("entry", ["conveyor", "dynamo"])
@pytest.mark.parametrize(
    ("name", "grad"),
    [_case(n, g) for n in sorted(h.PROGRAMS) for g in _grads(n) if (n, g) not in REPRESENTATIVE],
)
def test_every_ctx_program(name: str, grad: bool, entry: str, request: pytest.FixtureRequest) -> None:
    _run(name, entry, grad, request)
