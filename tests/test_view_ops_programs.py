"""PyTorch's ``test/test_view_ops.py`` programs through conveyor (``view_ops_catalogue``
and ``view_ops_catalogue2``: views and their in-place variants, writes through views
of inputs and of intermediates, views returned as outputs, ``view(dtype)``,
``view_as_real``/``view_as_complex``, ``resize_``), checked against eager with
``conveyor.testing.check`` on both entries (``conveyor.compile``,
``torch.compile(backend="conveyor")``), without grad and with grad (inputs as
non-leaves requiring grad), by ``dynamo_repro_programs.run``.

Default run: a representative set. Slow (``--runslow``): every program. A known
difference from eager is a strict xfail naming it (the sweep's report:
/work/reports/s12/h_views.md, V1..V3).
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import dynamo_repro_programs as dp  # noqa: E402
import view_ops_catalogue as vc  # noqa: E402

PROGRAMS = vc.load()

V1 = (
    "a write to the base of split/chunk/unbind outputs: eager's backward refuses them, conveyor.compile refuses "
    "at the call, the dynamo entry differentiates them (V1)"
)
V2 = "out= of diagonal_copy with grad: eager's backward has no derivative, the compiled program's runs (V2)"
V3 = (
    "an in-place view op on a view requiring grad: dynamo's own trace fails on autograd's stale view function "
    "(pytorch/pytorch issue 49825), before conveyor sees the graph (V3)"
)

#: (name, entry, grad) -> reason; entry or grad "*" matches either
XFAIL: dict[tuple[str, str, str], str] = {
    ("unbind_view_write_base", "*", "grad"): V1,
    ("chunk", "*", "grad"): V1,
    ("split_write_base", "*", "grad"): V1,
    ("view_copy_out", "*", "grad"): V2,
    ("as_strided_inplace_view", "dynamo", "grad"): V3,
    ("squeeze_inplace_view", "dynamo", "grad"): V3,
    ("unsqueeze_inplace_view", "dynamo", "grad"): V3,
}

REPRESENTATIVE = [
    "diagonal_view_write",
    "expand_view_write_intermediate",
    "unsqueeze_inplace_view",
    "flatten_view_as_strided_groups",
    "view_tensor_hsplit",
    "view_dtype_write",
    "view_as_complex_write",
    "memory_format_resize_",
]


def xfail_reason(name: str, entry: str, grad: bool) -> str | None:
    g = "grad" if grad else "nograd"
    for e in (entry, "*"):
        for gg in (g, "*"):
            if (name, e, gg) in XFAIL:
                return XFAIL[(name, e, gg)]
    return None


def _cases(names: list[str]) -> list[object]:
    return [
        pytest.param(n, g, id=f"{n}-{'grad' if g else 'nograd'}")
        for n in names
        for g in ([False, True] if dp.has_float_input(n, PROGRAMS) else [False])
    ]


def _run(name: str, entry: str, grad: bool, request: pytest.FixtureRequest) -> None:
    reason = xfail_reason(name, entry, grad)
    if reason:
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="conveyor: (running|compiling)", category=UserWarning)
        dp.run(name, entry, "eager", grad, programs=PROGRAMS)


def test_programs_are_many_and_named_once() -> None:
    assert len(PROGRAMS) >= 200
    assert set(REPRESENTATIVE) <= set(PROGRAMS)
    assert {k[0] for k in XFAIL} <= set(PROGRAMS)


@pytest.mark.parametrize("entry", ["conveyor", "dynamo"])
@pytest.mark.parametrize(("name", "grad"), _cases(REPRESENTATIVE))
def test_representative_program(name: str, grad: bool, entry: str, request: pytest.FixtureRequest) -> None:
    _run(name, entry, grad, request)


@pytest.mark.slow
@pytest.mark.parametrize("entry", ["conveyor", "dynamo"])
@pytest.mark.parametrize(("name", "grad"), _cases(sorted(PROGRAMS)))
def test_every_program(name: str, grad: bool, entry: str, request: pytest.FixtureRequest) -> None:
    _run(name, entry, grad, request)
