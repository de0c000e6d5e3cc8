"""A whole training step compiled as one function: forward, ``backward()``,
``opt.step()``, ``opt.zero_grad()`` (issue 20), on both entry points, compared
with eager over several steps: losses, parameters, gradients and optimizer
state, and never a FakeTensor left in a user's object.

Behind dynamo the step compiles (the optimizer's graph holds the parameters
as attributes: core Note [Tensors a dynamo graph holds]). Standalone, the
optimizer's state is state the program writes without taking it as an
argument (core Note [State a program reaches]): one graph cannot hold the
step, so ``conveyor.compile`` compiles it through dynamo, with one warning
(core Note [Programs only dynamo can split]), and nothing its trace touched
is left changed.
"""

from __future__ import annotations

import copy
import sys
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import conveyor
import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensor

sys.path.insert(0, str(Path(__file__).parent))
from zoo_harness import fresh_dynamo  # noqa: E402,F401  (autouse)

OPTIMIZERS: dict[str, Callable[[Any], torch.optim.Optimizer]] = {
    "sgd_momentum": lambda ps: torch.optim.SGD(ps, lr=0.1, momentum=0.9),
    "adamw": lambda ps: torch.optim.AdamW(ps, lr=0.01, foreach=False),
    "adamw_foreach": lambda ps: torch.optim.AdamW(ps, lr=0.01, foreach=True),
}


def _setup(opt_name: str) -> tuple[torch.nn.Module, torch.optim.Optimizer, Callable[..., torch.Tensor]]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.GELU(), torch.nn.Linear(16, 1))
    opt = OPTIMIZERS[opt_name](model.parameters())

    def step(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        return loss.detach()

    return model, opt, step


def _no_fakes(model: torch.nn.Module, opt: torch.optim.Optimizer) -> None:
    tensors = [*model.parameters(), *model.buffers(), *(p.grad for p in model.parameters() if p.grad is not None)]
    tensors += [v for s in opt.state.values() for v in s.values() if isinstance(v, torch.Tensor)]
    assert not any(isinstance(t, FakeTensor) for t in tensors)
    assert all(not isinstance(k, FakeTensor) for k in opt.state)


@pytest.mark.parametrize("opt_name", OPTIMIZERS)
@pytest.mark.parametrize("entry", ["conveyor", "dynamo"])
def test_a_whole_training_step_matches_eager(entry: str, opt_name: str) -> None:
    model, opt, step = _setup(opt_name)
    ref_model, ref_opt, ref_step = _setup(opt_name)
    compiled = conveyor.compile(step) if entry == "conveyor" else torch.compile(step, backend="conveyor")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i in range(4):
            x, y = torch.randn(4, 8), torch.randn(4, 1)
            torch.testing.assert_close(compiled(x, y), ref_step(x, y), msg=lambda m, i=i: f"loss, step {i}: {m}")
            _no_fakes(model, opt)
    for (name, p), q in zip(model.named_parameters(), ref_model.parameters(), strict=True):
        torch.testing.assert_close(p, q, msg=lambda m, name=name: f"{name}: {m}")
        assert p.grad is None and q.grad is None
    for p, q in zip(model.parameters(), ref_model.parameters(), strict=True):
        state, ref_state = opt.state[p], ref_opt.state[q]
        assert state.keys() == ref_state.keys()
        for k in state:
            torch.testing.assert_close(state[k], ref_state[k], msg=lambda m, k=k: f"optimizer state {k}: {m}")
    eager = [str(w.message) for w in caught if "eagerly" in str(w.message)]
    assert not eager, eager
    split = [str(w.message) for w in caught if "through dynamo" in str(w.message)]
    if entry == "conveyor":
        # the first thing one graph cannot hold: the gradients clip_grad_norm_ reads (Note [Hooks and
        # gradients a program reaches]), else the optimizer state the step writes
        assert len(split) == 1 and (".grad" in split[0] or "opt.state" in split[0]), split
        assert compiled.last.backend == "dynamo (split)"
    else:
        assert not split, split
    # plain eager training afterwards works on the same objects
    step(torch.randn(4, 8), torch.randn(4, 1))
    _no_fakes(model, opt)


def test_a_scheduler_step_inside_the_program_is_watched() -> None:
    model, opt, step = _setup("sgd_momentum")
    sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    ref = copy.deepcopy(sched.state_dict())

    def with_schedule(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = step(x, y)
        sched.step()
        return loss

    with pytest.warns(UserWarning, match="through dynamo"):
        conveyor.compile(with_schedule)(torch.randn(4, 8), torch.randn(4, 1))
    assert sched.state_dict()["last_epoch"] == ref["last_epoch"] + 1  # once, by the eager run
    assert opt.param_groups[0]["lr"] == pytest.approx(0.05)
    _no_fakes(model, opt)
