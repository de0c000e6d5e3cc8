"""PyTorch's ``test/dynamo/test_activation_checkpointing.py`` programs through conveyor
(``checkpoint_catalogue``, ``2`` and ``3``: reentrant and non-reentrant checkpoints,
selective checkpointing policies, random ops recomputed, kwargs, lists and tuples
in and out, nested checkpoints), checked against eager with
``conveyor.testing.check`` on both entries (``conveyor.compile``,
``torch.compile(backend="conveyor")``), without grad and with grad, by
``dynamo_repro_programs.run``. A reentrant checkpoint refuses ``autograd.grad``
(the checker's backward) in eager, so those programs run here without grad only;
their gradients are compared after ``.backward()`` as ``ckpt_<name>`` programs of
``checkpoint_hook_programs``, which ``test_compiled_autograd_programs.py`` runs in
every mode (conveyor's compiled autograd included) with the hook programs of
``test/dynamo/test_backward_higher_order_ops.py``. Default run: a representative
set; ``--runslow``: every program. The sweep's report: /work/reports/s13/h_ckpt.md.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
import ca_program_harness as h  # noqa: E402
import checkpoint_catalogue as cc  # noqa: E402
import checkpoint_catalogue2  # noqa: E402, F401  (registers its programs)
import checkpoint_catalogue3  # noqa: E402, F401
import checkpoint_hook_programs  # noqa: E402, F401
import dynamo_repro_programs as dp  # noqa: E402

PROGRAMS = cc.PROGRAMS

REENTRANT_NO_GRAD = (
    "a reentrant checkpoint of a module whose input needs no grad: eager's output needs none (the parameters get "
    "no gradient), dynamo's tag_activation_checkpoint gives it grad; torch.compile(backend='aot_eager') alike"
)
REENTRANT_ALIAS = (
    "an input a reentrant checkpoint returns as it is: eager's CheckpointFunction returns a view, dynamo's "
    "tag_activation_checkpoint the input itself; aot_eager alike"
)
NO_PRESERVE = (
    "preserve_rng_state=False: eager recomputes the dropout with the generator as the backward finds it, a compiled "
    "program keeps the forward's mask (upstream skips the check for this reason); aot_eager alike"
)
INVALID_CONTEXT = (
    "a context_fn giving objects that are not TorchDispatchModes: eager uses them, torch's checkpoint asserts when "
    "compiling (a capture is a compile); aot_eager raises alike"
)
MADE_INSIDE = (
    "a context_fn made while dynamo traces the program (NestedUserFunctionVariable): dynamo raises "
    "NotImplementedError; aot_eager alike"
)
INPLACE_SAC = (
    "an in-place op on a tensor a selective checkpoint saved: eager's backward refuses (cached tensor mutated), "
    "conveyor differentiates the function (the gradients of its out-of-place form: "
    "test_inplace_op_under_sac_gets_the_out_of_place_gradients); aot_eager raises BackendCompilerFailed"
)

#: (name, entry, grad) -> reason; entry or grad "*" matches either
XFAIL: dict[tuple[str, str, str], str] = {
    ("tags_module", "dynamo", "nograd"): REENTRANT_NO_GRAD,
    ("tags_decomps", "dynamo", "nograd"): REENTRANT_NO_GRAD,
    ("tags_dropout", "dynamo", "nograd"): REENTRANT_NO_GRAD,
    ("distributed_utils_checkpoint_wrapper_reentrant", "dynamo", "nograd"): REENTRANT_NO_GRAD,
    ("list_inputs", "dynamo", "nograd"): REENTRANT_ALIAS,
    ("compile_selective_checkpoint_random_op_no_preserve", "*", "grad"): NO_PRESERVE,
    ("compile_selective_checkpoint_invalid_context", "conveyor", "*"): INVALID_CONTEXT,
    ("sac_context_fn_made_inside", "dynamo", "*"): MADE_INSIDE,
    ("compile_selective_checkpoint_inplace_op", "*", "grad"): INPLACE_SAC,
}

REPRESENTATIVE = [
    "tags_recomputed_rand_non_reentrant",
    "compile_selective_checkpoint_must_not_recompute_gemm",
    "list_inputs",
]
#: ca_program_harness programs in the default run (every mode: test_compiled_autograd_programs.py, slow)
CA_REPRESENTATIVE = [
    ("ckpt_tags_dropout", "conveyor", "engine"),
    ("ac_rematerialize_with_no_annotations", "conveyor", "ca"),
    ("invoke_in_pt2", "dynamo", "ca"),
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
        for g in ([False, True] if n not in cc.REENTRANT and dp.has_float_input(n, PROGRAMS) else [False])
    ]


def _run(name: str, entry: str, grad: bool, request: pytest.FixtureRequest) -> None:
    reason = xfail_reason(name, entry, grad)
    if reason:
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="conveyor: (running|compiling)", category=UserWarning)
        warnings.filterwarnings("ignore", message=".*use_reentrant", category=UserWarning)
        dp.run(name, entry, "eager", grad, programs=PROGRAMS)


def test_programs_are_many_and_named_once() -> None:
    assert len(PROGRAMS) >= 55
    assert set(REPRESENTATIVE) <= set(PROGRAMS)
    assert {k[0] for k in XFAIL} <= set(PROGRAMS)
    assert {f"ckpt_{n}" for n in cc.REENTRANT} <= set(h.PROGRAMS)


@pytest.mark.parametrize("entry", ["conveyor", "dynamo"])
@pytest.mark.parametrize(("name", "grad"), _cases(REPRESENTATIVE))
def test_representative_program(name: str, grad: bool, entry: str, request: pytest.FixtureRequest) -> None:
    _run(name, entry, grad, request)


@pytest.mark.parametrize(("name", "forward", "backward"), CA_REPRESENTATIVE)
def test_representative_program_with_backward(name: str, forward: str, backward: str) -> None:
    expected, actual = h.outcome(name, forward, backward)
    h.compare(expected, actual)
    assert not [w for w in actual.warnings if "eagerly" in w], actual.warnings


@pytest.mark.slow
@pytest.mark.parametrize("entry", ["conveyor", "dynamo"])
@pytest.mark.parametrize(("name", "grad"), _cases(sorted(PROGRAMS)))
def test_every_program(name: str, grad: bool, entry: str, request: pytest.FixtureRequest) -> None:
    _run(name, entry, grad, request)


@pytest.mark.slow
@pytest.mark.parametrize("entry", ["conveyor", "dynamo"])
def test_inplace_op_under_sac_gets_the_out_of_place_gradients(entry: str) -> None:
    """Where eager's backward refuses (INPLACE_SAC; eager refuses without the
    checkpoint too: relu_ writes sigmoid's saved output), the compiled program's
    gradients are those of the same function written out of place."""
    from checkpoint_catalogue2 import _outplace

    torch.manual_seed(0)
    x, y = torch.randn(4, 4, requires_grad=True), torch.randn(4, 4, requires_grad=True)
    ref = torch.autograd.grad(_outplace(x, y).sum(), (x, y))
    compiled = dp.compiler(entry, "eager")(PROGRAMS["compile_selective_checkpoint_inplace_op"].build())
    got = torch.autograd.grad(compiled(x, y).sum(), (x, y))
    for r, g in zip(ref, got, strict=True):
        torch.testing.assert_close(g, r)
