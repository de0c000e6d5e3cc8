"""The Hugging Face zoo (``test_hf_zoo.ZOO``: small configs, random weights,
no dropout) through the ``inductor`` backend, on both entry points:
``conveyor.compile(m, backend="inductor")`` and ``torch.compile(m,
backend="conveyor", options={"backend": "inductor"})`` (the zoo's
``conveyor_inductor`` and ``dynamo_inductor`` entries).

Every model's forward over two input shapes, against an eager copy; training
steps (``hf_harness.train_like_eager``: AdamW, loss, every gradient and
buffer per step, no eager fallback) for two of them: the zoo's own checks,
whose entry points, default (CI) cases and parameters are rows of the zoo's
tables. Inductor fuses and reorders floating-point work, so results agree
with eager to rounding, as ``torch.compile``'s do (``TOL``, the zoo's
tolerance, holds for these small models). Each first compile builds C++
kernels (seconds per graph); the default run (CI) keeps a few cases,
``--runslow`` the rest.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
from test_hf_zoo import (  # noqa: E402
    ZOO,
    _fresh,  # noqa: F401  (the zoo's autouse fixture: dynamo reset, seed)
    _params,
    forward_matches_eager_over_two_shapes,
    training_steps_match_eager,
)

ENTRIES = ["conveyor_inductor", "dynamo_inductor"]
TRAINED = ["vit", "gpt2"]


@pytest.mark.parametrize("name,entry", _params("forward", list(ZOO), ENTRIES))
def test_forward_matches_eager_over_two_shapes(name: str, entry: str) -> None:
    forward_matches_eager_over_two_shapes(name, entry)


@pytest.mark.parametrize("name,entry", _params("train", TRAINED, ENTRIES))
def test_training_steps_match_eager(name: str, entry: str) -> None:
    training_steps_match_eager(name, entry)
