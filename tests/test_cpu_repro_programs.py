"""PyTorch's Inductor CPU repro programs (``cpu_repro_programs.py``: ``CPUReproTests``)
through conveyor, checked against eager by ``conveyor.testing.check`` on both entry
points, with the ``eager`` and ``inductor`` backends, under no_grad and with grad.

Default run: a handful of representative programs with the eager backend (an
Inductor compile costs tens of seconds cold on CI; ``test_torchinductor_programs``
keeps one in the default run). Slow (``--runslow``): every program, both entries,
both backends.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import cpu_repro_programs as cp  # noqa: E402

cp.load()

#: (name, backend, grad) -> reason; backend or grad "*" matches either
XFAIL: dict[tuple[str, str, str], str] = {
    ("asinh_large_float32_inplace", "*", "grad"): (
        "eager has no derivative for asinh_ (derivatives.yaml: not_implemented) and raises in the backward "
        "(aot_eager when it compiles); conveyor differentiates the functional asinh and gives asinh's gradient"
    ),
}
XFAIL[("invalid_index_of_empty_tensor", "inductor", "*")] = (
    "eager raises IndexError at the call; Inductor raises it while it lowers the graph, which conveyor reports "
    "as a StageError naming the stage and the IndexError (torch.compile raises InductorError alike)"
)
#: Inductor drops an explicit float16 round trip unless emulate_precision_casts is set: torch.compile(fn)
#: differs from eager alike; {"config": {"emulate_precision_casts": True}} gives eager's values
_ROUND_TRIP = "Inductor elides a float16 round trip without emulate_precision_casts (torch.compile alike)"
XFAIL.update(
    {
        (name, "inductor", "*"): _ROUND_TRIP
        for name in ("emulate_precision_casts_explicit_lowp_round_trip", "emulate_precision_casts_preserves_fused_fp16_rounding")
    }
)

#: a handful on the default run (eager backend, both entries, with and without grad)
REPRESENTATIVE = ["index_put2", "constant_store", "mutation_transpose_reshape_ordering", "rrelu_fallback_random"]


def _xfail(name: str, backend: str, grad: bool) -> str | None:
    g = "grad" if grad else "nograd"
    for b in (backend, "*"):
        for gg in (g, "*"):
            if (name, b, gg) in XFAIL:
                return XFAIL[(name, b, gg)]
    return None


def _cases(names: list[str]) -> list[Any]:
    return [
        pytest.param(n, g, id=f"{n}-{'grad' if g else 'nograd'}")
        for n in names
        for g in ([False, True] if cp.has_grad(n) else [False])
    ]


def _run(name: str, entry: str, backend: str, grad: bool, request: pytest.FixtureRequest) -> None:
    reason = _xfail(name, backend, grad)
    if reason:
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="conveyor: running", category=UserWarning)
        cp.run(name, entry, backend, grad)


@pytest.mark.parametrize("entry", ["conveyor", "dynamo"])
@pytest.mark.parametrize(("name", "grad"), _cases(REPRESENTATIVE))
def test_representative_program(name: str, grad: bool, entry: str, request: pytest.FixtureRequest) -> None:
    _run(name, entry, "eager", grad, request)


def test_programs_are_many_and_named_once() -> None:
    assert len(cp.PROGRAMS) >= 200
    assert set(REPRESENTATIVE) <= set(cp.PROGRAMS)
    assert {n for n, _, _ in XFAIL} <= set(cp.PROGRAMS)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["eager", "inductor"])
@pytest.mark.parametrize("entry", ["conveyor", "dynamo"])
@pytest.mark.parametrize(("name", "grad"), _cases(sorted(cp.PROGRAMS)))
def test_every_program(name: str, grad: bool, entry: str, backend: str, request: pytest.FixtureRequest) -> None:
    _run(name, entry, backend, grad, request)
