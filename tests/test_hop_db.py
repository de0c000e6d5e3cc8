"""PyTorch's higher-order-op database (``hop_db``, see ``tests/hop_db_sweep.py``)
through ``conveyor.compile`` and ``torch.compile(backend="conveyor")``, each entry's
sample without grad and, where the op supports autograd, with grad, compared with eager
by ``conveyor.testing.check``.

Regression: ``while_loop_stack_output`` and ``flex_attention_backward`` (called
directly, not through dynamo) raised from their own make_fx tracing rules inside
``conveyor.compile``'s capture (an AttributeError, a TypeError); they now compile
through dynamo (core Note [Higher-order ops the capture cannot trace]).

Default run: a few entries (the two regressions among them); slow: every entry on
both entry points, with grad where the op supports it. No entry is known wrong.
(``aot_eager``, for comparison, raises on ``invoke_quant`` with grad on torch 2.13.)
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import hop_db_sweep as hs  # noqa: E402

pytest.importorskip("torch.testing._internal.hop_db")

ENTRIES = hs.entries()


def _run(name: str, entry: str, grad: bool) -> None:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=UserWarning)
        hs.run(name, entry, grad)


#: the default run's cases (entry, with grad); the rest is slow
DEFAULT = {
    ("while_loop_stack_output.simple", "conveyor", False),  # regression
    ("flex_attention_backward.simple", "conveyor", False),  # regression
    ("cond.simple", "conveyor", True),
    ("scan.simple", "conveyor", False),
    ("invoke_subgraph.simple", "dynamo", True),
    ("auto_functionalize.simple", "conveyor", False),
    ("register_hook.simple", "conveyor", False),
}
CASES = [
    (n, e, g)
    for n, autograd in ENTRIES
    for e in ("conveyor", "dynamo")
    for g in ((False, True) if autograd else (False,))
]


def _param(n: str, e: str, g: bool) -> object:
    return pytest.param(n, e, g, id=f"{n}-{e}-{'grad' if g else 'nograd'}")


@pytest.mark.parametrize(("name", "entry", "grad"), [_param(*c) for c in CASES if c in DEFAULT])
def test_hop_db_sample(name: str, entry: str, grad: bool, request: pytest.FixtureRequest) -> None:
    if (name, entry, grad) == ("invoke_subgraph.simple", "dynamo", True):
        # torch 2.11's invoke_subgraph backward asserts a fake mode among its saved values
        # and gradients, which conveyor's joint trace does not meet there (a loud error)
        request.applymarker(pytest.mark.xfail(raises=AssertionError, strict=False, reason=INVOKE_SUBGRAPH_211))
    _run(name, entry, grad)


INVOKE_SUBGRAPH_211 = "torch 2.11: invoke_subgraph's backward raises 'fake_mode should be enabled for HOPs'"


@pytest.mark.slow
@pytest.mark.parametrize(("name", "entry", "grad"), [_param(*c) for c in CASES if c not in DEFAULT])
def test_hop_db_every_sample(name: str, entry: str, grad: bool) -> None:
    _run(name, entry, grad)


def test_hop_db_is_swept() -> None:
    names = {n for n, _ in ENTRIES}
    assert {"cond.simple", "while_loop.simple", "map.simple", "scan.simple", "invoke_subgraph.simple"} <= names
    # a default case names a hop this torch's hop_db has (register_hook is newer than torch 2.11)
    assert {c for c in CASES if c in DEFAULT} == {c for c in DEFAULT if c[0] in names}
