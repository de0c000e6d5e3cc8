"""Activation checkpointing under both entry points (issue 20):
``torch.utils.checkpoint`` non-reentrant (traced as it is) and reentrant
(core Note [Reentrant checkpointing]: its function is traced in place of
``CheckpointFunction``), compiled without an eager fallback and with eager's
values and gradients. Reentrant checkpointing refuses ``autograd.grad``, so
gradients are compared after ``.backward()``."""

from __future__ import annotations

import copy
import sys
import warnings
from pathlib import Path
from typing import Any

import conveyor
import pytest
import torch
from torch.utils.checkpoint import checkpoint

sys.path.insert(0, str(Path(__file__).parent))
from zoo_harness import fresh_dynamo  # noqa: E402,F401  (autouse)


class Blocks(torch.nn.Module):
    def __init__(self, reentrant: bool) -> None:
        super().__init__()
        self.reentrant = reentrant
        self.blocks = torch.nn.ModuleList(
            torch.nn.Sequential(torch.nn.LayerNorm(8), torch.nn.Linear(8, 8), torch.nn.GELU(), torch.nn.Dropout(0.3))
            for _ in range(2)
        )
        self.head = torch.nn.Linear(8, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = x + checkpoint(block, x, use_reentrant=self.reentrant)
        return self.head(x).square().mean()


ENTRIES: dict[str, Any] = {
    "conveyor": conveyor.compile,
    "dynamo": lambda m: torch.compile(m, backend="conveyor"),
}


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("reentrant", [False, True], ids=["non_reentrant", "reentrant"])
def test_checkpointed_blocks_train_as_in_eager(entry: str, reentrant: bool) -> None:
    torch.manual_seed(0)
    model = Blocks(reentrant)
    ref = copy.deepcopy(model)
    compiled = ENTRIES[entry](model)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for step in range(2):
            x = torch.randn(4, 8, requires_grad=True)
            x_ref = x.detach().clone().requires_grad_()
            torch.manual_seed(step)
            loss = compiled(x)
            torch.manual_seed(step)
            ref_loss = ref(x_ref)
            torch.testing.assert_close(loss, ref_loss)
            loss.backward()
            ref_loss.backward()
            torch.testing.assert_close(x.grad, x_ref.grad)
            for (name, p), q in zip(model.named_parameters(), ref.parameters(), strict=True):
                torch.testing.assert_close(p.grad, q.grad, msg=lambda m, name=name: f"{name}: {m}")
    assert not [w for w in caught if "eagerly" in str(w.message)]


def _x_and_cosines(x: torch.Tensor, ys: list[torch.Tensor]) -> Any:
    return x, [ys[0].cos(), ys[1].cos()]


def test_reentrant_checkpoint_outputs_in_a_list_do_not_require_grad() -> None:
    """Note [Reentrant checkpointing]: only the tensors ``fn`` returns directly or
    in a tuple are ``CheckpointFunction``'s outputs; those in a list were computed
    under ``no_grad`` (eager: no grad; conveyor.compile gave them grad), and an
    input returned as it is comes back as a view of it."""
    from conveyor.testing import check

    def f(x: torch.Tensor, ys: list[torch.Tensor]) -> Any:
        return checkpoint(_x_and_cosines, x, ys, use_reentrant=True)

    x = torch.randn(3, requires_grad=True) * 1
    ys = [torch.randn(3, requires_grad=True) * 1, torch.randn(3, requires_grad=True) * 1]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = conveyor.compile(f)(x, ys)
        check(f, torch.randn(3), [torch.randn(3), torch.randn(3)])  # no grad: the input itself is not returned
    assert not [w for w in caught if "eagerly" in str(w.message)]
    assert out[0].requires_grad and out[0] is not x and out[0]._base is x
    assert [t.requires_grad for t in out[1]] == [False, False]


def test_a_backward_inside_the_program_compiles_under_compiled_autograd() -> None:
    """Note [Joint trace under compiled autograd]: a program that runs
    ``autograd.grad`` itself, traced inside ``conveyor_compiled_autograd.enable()``,
    had that backward captured by compiled autograd, and the compiled program
    then ran on the trace's FakeTensors (AssertionError at the call)."""
    import conveyor_compiled_autograd as cca

    def f(x: torch.Tensor) -> torch.Tensor:
        z = checkpoint(lambda a: torch.sigmoid(a + 4), x, use_reentrant=False)
        return torch.autograd.grad(z.sum(), x)[0]

    x = torch.randn(4, 4, requires_grad=True)
    with cca.enable():
        got = conveyor.compile(f)(x)
    torch.testing.assert_close(got, f(x))
