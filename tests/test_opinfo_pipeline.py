"""OpInfo through the full pipeline (every installed stage), with the
``eager`` and the ``triton`` backend: each sample right or a documented
fallback (``tests/opinfo_pipeline_sweep.py`` says which is which).

CI runs a fixed, representative subset (pointwise, reductions, views, a
normalization, a loss, indexing, a matmul, ops with Python kernels that
differ from eager); the whole ``op_db`` is the slow test (``--runslow``),
and, run as a script with counts, ``python tests/opinfo_pipeline_sweep.py``.
Known differences would be listed in ``KNOWN_WRONG`` with their cause, each
a strict xfail, so a fix shows up (none is left); documented deviations from
an eager result that is itself wrong are in the sweep's ``DEVIATIONS``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))  # the sweep module beside this file

from opinfo_pipeline_sweep import DEVIATIONS, OPINFOS, run_sample, sample_programs  # noqa: E402

SUBSET = (
    "add mul div.no_rounding_mode sigmoid tanh exp log1p abs where clamp pow "
    "sum mean amax var_mean softmax log_softmax cumsum "
    "view reshape transpose permute expand t unsqueeze squeeze narrow select slice cat stack split "
    "nn.functional.layer_norm nn.functional.gelu nn.functional.silu nn.functional.relu "
    "nn.functional.softshrink nn.functional.hardshrink nn.functional.multilabel_margin_loss "
    "nn.functional.multi_margin_loss nn.functional.cross_entropy nn.functional.mse_loss "
    "index_select gather index_put masked_fill matmul addmm nn.functional.linear "
    "flatten float"
).split()

# op -> cause, for ops whose samples differ from eager (strict xfail: a fix shows up); empty: the
# former entries (as_strided_scatter, broadcast_shapes, linalg.eig, sparse.mm.reduce,
# sparse.sampled_addmm) are right, a documented fallback or a documented deviation (DEVIATIONS)
KNOWN_WRONG: dict[str, str] = {}

#: ops that were wrong once, each fixed by a fallback, a deviation or a fix (issue 12)
FORMERLY_WRONG = "as_strided_scatter broadcast_shapes linalg.eig sparse.mm.reduce sparse.sampled_addmm".split()

BACKENDS = ("eager", "triton")


def _check_op(name: str, backend: str, dtype: torch.dtype, grad: bool, limit: int) -> None:
    results = [
        (i, *run_sample(fn, tensors, backend, dtype, with_grad, deviation=DEVIATIONS.get(name, "")))
        for i, (fn, tensors, with_grad) in enumerate(sample_programs(name, dtype, grad, limit))
    ]
    wrong = [f"{name}[{i}]: {detail}" for i, outcome, detail in results if outcome == "wrong"]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", SUBSET)
def test_opinfo_subset_float32_with_grad(name, backend) -> None:
    _check_op(name, backend, torch.float32, grad=True, limit=2 if backend == "triton" else 3)


# Note [Python kernels that differ from eager] (conveyor_functionalize.decompositions) and
# conveyor_triton.decompose.DIFFERS_FROM_EAGER: found with NaN / inf / -inf / -0.0 in the samples
NONFINITE = (
    "nn.functional.softshrink nn.functional.hardshrink nn.functional.multi_margin_loss "
    "nn.functional.multilabel_margin_loss nn.functional.relu nn.functional.gelu clamp"
).split()


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", NONFINITE)
def test_opinfo_nonfinite_samples(name, backend) -> None:
    results = [
        (i, *run_sample(fn, tensors, backend, torch.float32, with_grad))
        for i, (fn, tensors, with_grad) in enumerate(sample_programs(name, torch.float32, True, 2, nonfinite=True))
    ]
    assert results, f"{name}: no sample with a floating input"
    wrong = [f"{name}[{i}]: {detail}" for i, outcome, detail in results if outcome == "wrong"]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16], ids=["float16", "bfloat16"])
@pytest.mark.parametrize("name", "add sigmoid sum softmax nn.functional.layer_norm nn.functional.gelu matmul".split())
def test_opinfo_subset_low_precision_triton(name, dtype) -> None:
    _check_op(name, "triton", dtype, grad=False, limit=2)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", FORMERLY_WRONG)
def test_opinfo_formerly_wrong_float32_with_grad(name, backend) -> None:
    _check_op(name, backend, torch.float32, grad=True, limit=2)


def _all_ops() -> list[object]:
    return [
        pytest.param(n, marks=[pytest.mark.xfail(strict=True, reason=KNOWN_WRONG[n])] if n in KNOWN_WRONG else [])
        for n in sorted(OPINFOS)
    ]


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", _all_ops())
def test_opinfo_all_ops_float32_with_grad(name, backend) -> None:
    _check_op(name, backend, torch.float32, grad=True, limit=3)
