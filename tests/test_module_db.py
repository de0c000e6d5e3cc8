"""PyTorch's ``module_db`` (``torch.testing._internal.common_modules``)
through the full pipeline, on both entry points (``conveyor.compile`` and
``torch.compile(backend="conveyor")``) with the ``eager`` backend: each
module's ModuleInfo samples in train mode, inputs requiring grad, compared
with eager by ``conveyor.testing.check`` (outputs, aliasing, inputs and
buffers after the call, input and parameter gradients);
``tests/module_db_sweep.py`` says how a sample is built and judged.

CI runs a representative subset (a linear layer, a convolution, batch norm's
buffer updates in training, a recurrent layer, attention, a transformer
layer, a loss, a lazy module); the whole ``module_db`` is the slow test, and,
with counts, ``python tests/module_db_sweep.py``. Known differences would be
strict xfails in ``KNOWN_WRONG`` with their cause (none is left);
``nn.FractionalMaxPool2d`` runs eagerly with conveyor's warning (its
sample's ``_random_samples`` are float64 for a float32 input, which eager's
kernel takes and the meta kernel refuses: Note [Errors of torch's Python
kernels]).

Programs the sweeps found wrong that are not ``module_db`` samples are at the
end, as regression tests (reduced from test_aotdispatch.py's programs).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import torch
from conveyor.testing import check

sys.path.insert(0, str(Path(__file__).parent))  # the sweep module beside this file

from module_db_sweep import ENTRIES, MODULES, run_module, sample_modules  # noqa: E402

SUBSET = (
    "nn.Linear nn.Conv2d nn.BatchNorm2d nn.LayerNorm nn.GRU nn.Embedding nn.MultiheadAttention "
    "nn.TransformerEncoderLayer nn.CrossEntropyLoss nn.LazyConv1d"
).split()

#: module -> cause, for modules whose samples differ from eager (strict xfail)
KNOWN_WRONG: dict[str, str] = {}


def _check_module(name: str, entry: str, training: bool, limit: int) -> None:
    compile = ENTRIES[entry]("eager")
    results = [
        (i, *run_module(m, tensors, compile, "eager", torch.float32, training))
        for i, (m, tensors) in enumerate(sample_modules(name, torch.float32, training, limit))
    ]
    wrong = [f"{name}[{i}]: {detail}" for i, outcome, detail in results if outcome == "wrong"]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("entry", sorted(ENTRIES))
@pytest.mark.parametrize("name", SUBSET)
def test_module_db_subset_training(name: str, entry: str) -> None:
    _check_module(name, entry, training=True, limit=1)


def _all_modules() -> list[object]:
    return [
        pytest.param(n, marks=[pytest.mark.xfail(strict=True, reason=KNOWN_WRONG[n])] if n in KNOWN_WRONG else [])
        for n in sorted(MODULES)
    ]


@pytest.mark.slow
@pytest.mark.parametrize("training", [True, False], ids=["train", "eval"])
@pytest.mark.parametrize("entry", sorted(ENTRIES))
@pytest.mark.parametrize("name", _all_modules())
def test_module_db_all(name: str, entry: str, training: bool) -> None:
    _check_module(name, entry, training, limit=3)


# -- wrong results the sweeps found (fixed) ---------------------------------------------


def test_dynamo_detach_inplace_of_intermediate() -> None:
    # test_aotdispatch.py's test_output_aliases_intermediate_inplace_view_with_detach, reduced
    def f(a):
        out = a * 3
        out.detach_()
        return out

    torch._dynamo.reset()
    check(f, torch.ones(2, requires_grad=True), compile=lambda fn: torch.compile(fn, backend="conveyor"))


@pytest.mark.parametrize("backend", ["triton", "inductor"])
def test_kernel_backend_detached_output_of_grad_input(backend: str) -> None:
    # test_aotdispatch.py's test_some_outputs_dont_require_grad_non_view, reduced
    import conveyor

    check(lambda a: a.add(1).detach(), torch.randn(3, 3, requires_grad=True),
          compile=lambda fn: conveyor.compile(fn, backend=backend))
