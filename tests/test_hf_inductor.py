"""The Hugging Face zoo (``test_hf_zoo.ZOO``: small configs, random weights,
no dropout) through the ``inductor`` backend, on both entry points:
``conveyor.compile(m, backend="inductor")`` and ``torch.compile(m,
backend="conveyor", options={"backend": "inductor"})``.

Every model's forward over two input shapes, against an eager copy; training
steps (``hf_harness.train_like_eager``: AdamW, loss, every gradient and
buffer per step, no eager fallback) for two of them. Inductor fuses and
reorders floating-point work, so results agree with eager to rounding, as
``torch.compile``'s do (``TOL``, the zoo's tolerance, holds for these small
models). Each first compile builds C++ kernels (seconds per graph); the
default run (CI) keeps a few cases, ``--runslow`` the rest.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import conveyor
import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
from hf_harness import TOL, train_like_eager  # noqa: E402
from test_hf_zoo import ZOO, _pair, _tensors  # noqa: E402

ENTRY: dict[str, Callable[[Any], Any]] = {
    "conveyor": lambda m: conveyor.compile(m, backend="inductor"),
    "dynamo": lambda m: torch.compile(m, backend="conveyor", options={"backend": "inductor"}),
}

#: what the default (CI) run keeps: one model forward on both entry points (they share most kernels)
#: and a training run: the two that failed first
#: (GPT-2's view, ViT's convolution layout: conveyor-inductor's CHANGELOG)
DEFAULT = {
    ("forward", "gpt2", "conveyor"),
    ("forward", "gpt2", "dynamo"),
    ("train", "vit", "conveyor"),
}

TRAINED = ["vit", "gpt2"]


def _params(kind: str, names: list[str]) -> list[Any]:
    return [
        pytest.param(n, e, id=f"{n}-{e}", marks=() if (kind, n, e) in DEFAULT else pytest.mark.slow)
        for n in names
        for e in ENTRY
    ]


@pytest.fixture(autouse=True)
def _fresh() -> None:
    torch._dynamo.reset()
    torch.manual_seed(0)


@pytest.mark.parametrize("name,entry", _params("forward", list(ZOO)))
def test_forward_matches_eager_over_two_shapes(name: str, entry: str) -> None:
    model, ref = _pair(name)
    compiled = ENTRY[entry](model)
    with torch.no_grad():
        for variant in (0, 1):
            kwargs = ZOO[name][1](variant)
            got, want = compiled(**kwargs), ref(**kwargs)
            assert list(got.keys()) == list(want.keys())
            for a, b in zip(_tensors(got), _tensors(want), strict=True):
                torch.testing.assert_close(a, b, **TOL)


@pytest.mark.parametrize("name,entry", _params("train", TRAINED))
def test_training_steps_match_eager(name: str, entry: str) -> None:
    model, _ = _pair(name, train=True)

    def inputs(step: int) -> dict[str, Any]:
        kwargs = ZOO[name][1](step % 2)
        return {**kwargs, **ZOO[name][2](kwargs)}

    train_like_eager(model, ENTRY[entry], inputs)
