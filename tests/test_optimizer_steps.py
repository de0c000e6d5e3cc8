"""Training steps with every optimizer of PyTorch's optimizer database
(``torch.testing._internal.common_optimizers.optim_db``: each configuration its
``optim_inputs_func`` lists, single-tensor, foreach and fused), lr schedulers,
gradient clipping and ``torch.amp.GradScaler``, compiled four ways and compared
with eager after every step, bit for bit (tests/optimizer_catalogue.py): the
whole step with ``conveyor.compile`` and behind dynamo, only the model, only
``opt.step``.

Where torch.compile's own pipeline rounds an optimizer differently from eager
(dynamo traces single-tensor Adadelta, Adam's amsgrad, ... with other ops than
eager runs), conveyor must give ``torch.compile(backend="aot_eager")``'s numbers
bit for bit instead. That holds for every mode whose optimizer step went through
dynamo: behind dynamo, and ``conveyor.compile`` of the whole step or of
``opt.step`` (both read ``.grad``, so conveyor compiles them through dynamo, warned);
never for the model alone. Example: torch 2.11's dynamo traces single-tensor
SGD's ``param.add_(buf, alpha=-lr)`` as ``param.add_(torch.mul(buf, -lr))``
(``TensorVariable.method_add_`` under ``config.enable_dynamo_decompositions``;
2.12 on decompose only a tensor ``alpha``), two roundings where eager's CPU kernel
computes ``param + alpha * buf`` with one (a fused multiply-add): one weight
element of the SGD case differs by 7e-9 from eager, on aot_eager as on conveyor.
The default (CI) run keeps a representative case per kind; ``--runslow`` runs
the whole database.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from optimizer_catalogue import SCHEDULERS, Case, db_cases, run_and_compare  # noqa: E402
from zoo_harness import fresh_dynamo  # noqa: E402,F401  (autouse)

INDUCTOR_TOL = {"atol": 1e-5, "rtol": 1e-4}


def matches_eager(case: Case, mode: str, steps: int = 3, backend: str | None = None,
                  tol: dict[str, float] | None = None, expect: str = "right") -> None:
    """``case`` trained ``steps`` steps compiled by ``mode`` matches eager (or aot_eager where that differs from eager)."""
    try:
        outcome = run_and_compare(case, mode, steps, backend, tol)
    except AssertionError as eager_difference:
        if mode.startswith("model"):  # the optimizer runs eagerly: nothing of dynamo's rounds it
            raise
        torch._dynamo.reset()
        try:
            outcome = run_and_compare(case, mode, steps, backend, tol, reference="aot_eager")
        except AssertionError as e:
            raise AssertionError(f"differs from eager ({eager_difference}) and from aot_eager ({e})") from None
    assert outcome.kind == expect, outcome
    if mode in ("whole_conveyor", "optstep_conveyor"):
        # documented: the step reads .grad, so it is compiled through dynamo (aot_eager is its fair reference)
        assert any("through dynamo" in w for w in outcome.warnings), outcome.warnings


SGD = Case("SGD", "momentum", {"momentum": 0.9, "lr": 0.1})
ADAM_FOREACH = Case("Adam", "amsgrad", {"weight_decay": 0.1, "amsgrad": True}, "foreach")
ADAMW_FUSED = Case("AdamW", "tensor lr", {"lr": torch.tensor(0.01)}, "fused")

#: the default run: one case per way of compiling and per piece of a training step
REPRESENTATIVE: list[tuple[Case, str]] = [
    (SGD, "whole_dynamo"),
    (SGD, "whole_conveyor"),
    (ADAMW_FUSED.with_(sched="cosine", clip="norm_foreach"), "whole_dynamo"),  # a tensor lr: no dynamic float (B3)
    (Case("SGD", "nesterov", {"momentum": 0.9, "nesterov": True, "weight_decay": 0.1}, scaler=True), "model_conveyor"),
    (Case("RMSprop", "centered", {"weight_decay": 0.1, "centered": True, "momentum": 0.1}, "foreach"), "optstep_dynamo"),
    (SGD, "optstep_conveyor"),  # through dynamo: it reads p.grad (core Note [Hooks and gradients a program reaches])
]


@pytest.mark.parametrize("case,mode", [pytest.param(c, m, id=f"{c.id}-{m}") for c, m in REPRESENTATIVE])
def test_training_step_matches_eager(case: Case, mode: str) -> None:
    matches_eager(case, mode)


def test_an_lr_that_changes_between_steps() -> None:
    # dynamo recompiles SGD.step with the changed lr as a tensor input read by .item() (B3 in reports/s8/h_optim.md)
    matches_eager(Case("SGD", "default", {"lr": 0.1}, sched="exponential"), "optstep_dynamo")


# -- the whole database, and the rest -------------------------------------------------


def _db_params() -> list[Any]:
    return [pytest.param(c, id=c.id) for c in db_cases() if c.impl != "differentiable"]


@pytest.mark.slow
@pytest.mark.parametrize("case", _db_params())
def test_every_optim_db_configuration_compiled_whole(case: Case) -> None:
    matches_eager(case, "whole_dynamo")


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["whole_conveyor", "optstep_dynamo"])
@pytest.mark.parametrize("optim,impl", [("Adam", "fused"), ("NAdam", "foreach"), ("Rprop", "single"), ("LBFGS", "single")])
def test_each_way_of_compiling(optim: str, impl: str, mode: str) -> None:
    case = next(c for c in db_cases() if c.optim == optim and c.impl == impl)
    matches_eager(case, mode)


@pytest.mark.slow
@pytest.mark.parametrize("sched", list(SCHEDULERS))
def test_every_scheduler_inside_the_step(sched: str) -> None:
    matches_eager(SGD.with_(sched=sched), "whole_dynamo", steps=4)


@pytest.mark.slow
@pytest.mark.parametrize("sched", ["onecycle", "cyclic"])  # they cycle AdamW's betas too
def test_schedulers_with_a_tensor_lr(sched: str) -> None:
    matches_eager(ADAMW_FUSED.with_(sched=sched), "whole_dynamo", steps=4)


@pytest.mark.slow
@pytest.mark.parametrize("clip,zero_first", [("norm_foreach", True), ("value", False), (None, False)])
def test_clipping_and_zero_grad_placement(clip: str | None, zero_first: bool) -> None:
    matches_eager(SGD.with_(clip=clip, zero_first=zero_first), "whole_dynamo")


@pytest.mark.slow
@pytest.mark.parametrize("case,mode", [
    (SGD, "whole_dynamo"), (SGD, "whole_conveyor"), (SGD, "model_conveyor"),
    (Case("AdamW", "default", {}, "fused"), "whole_dynamo"),
], ids=lambda v: v.id if isinstance(v, Case) else v)
def test_grad_scaler_on_cpu(case: Case, mode: str) -> None:
    matches_eager(case.with_(scaler=True), mode)


GPT2 = Case("AdamW", "default", {}, "foreach", model="gpt2", sched="linear")


@pytest.mark.slow
@pytest.mark.parametrize("case,mode", [
    *[(SGD.with_(model=m), mode) for m in ("conv", "lstm", "embedding") for mode in ("whole_dynamo", "model_conveyor")],
    (SGD.with_(model="conv"), "model_dynamo"),
    (GPT2, "model_conveyor"),
    # functionalize refuses the graph's symbolic views: it compiles with static sizes, warned (h_optim B4, fixed)
    (GPT2, "whole_dynamo"),
], ids=lambda v: v.id if isinstance(v, Case) else v)
def test_models(case: Case, mode: str) -> None:
    matches_eager(case, mode)


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["whole_dynamo", "model_conveyor"])
@pytest.mark.parametrize("base", [Case("SparseAdam", "default", {}), Case("Adagrad", "default", {})], ids=lambda c: c.optim)
def test_sparse_gradients(base: Case, mode: str) -> None:
    matches_eager(base.with_(model="sparse_embedding", clip=None), mode)


@pytest.mark.slow
@pytest.mark.parametrize("case,mode", [
    (Case("Adam", "default", {}, "foreach"), "whole_dynamo"),
    (Case("Adam", "default", {}, "foreach"), "model_conveyor"),
    (Case("SGD", "default", {}), "whole_conveyor"),
    (ADAMW_FUSED.with_(model="conv", clip="norm_foreach"), "whole_dynamo"),
    (Case("SGD", "nesterov", {"momentum": 0.9, "nesterov": True, "weight_decay": 0.1}, sched="onecycle"), "whole_dynamo"),
], ids=lambda v: v.id if isinstance(v, Case) else v)
def test_inductor_backend(case: Case, mode: str) -> None:
    matches_eager(case, mode, backend="inductor", tol=INDUCTOR_TOL)
