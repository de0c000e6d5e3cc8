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

import functools
import sys
import warnings
from pathlib import Path

import pytest
import torch
from conveyor.testing import check
from conveyor.testing.opinfo import sample_call

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
    if (name, entry, grad) == ("invoke_subgraph.simple", "dynamo", True) and _dynamo_keeps_invoke_subgraph():
        request.applymarker(pytest.mark.xfail(raises=AssertionError, strict=True, reason=INVOKE_SUBGRAPH))
    _run(name, entry, grad)


#: a known conveyor bug, on every torch (aot_eager compiles it): see test_a_nested_compile_region_with_grad
INVOKE_SUBGRAPH = (
    "conveyor runs torch's InvokeSubgraphAutogradOp.backward when the compiled program's backward runs, on "
    "real tensors; torch only ever traces it (on fake tensors): it raises 'fake_mode should be enabled for HOPs'"
)


@functools.cache
def _dynamo_keeps_invoke_subgraph() -> bool:
    """Whether dynamo leaves hop_db's invoke_subgraph sample an ``invoke_subgraph`` node
    (torch 2.11 and 2.12 do) rather than inlining the region (2.13 and 2.14 do)."""
    info = next(i for i in hs._db() if f"{i.name}.{i.variant_test_name}" == "invoke_subgraph.simple")
    fn, tensors = sample_call(info.op, next(iter(info.sample_inputs("cpu", torch.float32))))
    kept: list[bool] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: object) -> torch.fx.GraphModule:
        kept.append(any(n.target is torch.ops.higher_order.invoke_subgraph for n in gm.graph.nodes))
        return gm

    torch._dynamo.reset()
    try:
        torch.compile(fn, backend=backend)(*tensors)
    finally:
        torch._dynamo.reset()
    return any(kept)


@pytest.mark.xfail(raises=AssertionError, strict=True, reason=INVOKE_SUBGRAPH)
def test_a_nested_compile_region_with_grad_behind_dynamo() -> None:
    """Known bug (every torch, 2.11-2.14.1): behind dynamo, a region
    ``torch.compiler.nested_compile_region`` marks stays an ``invoke_subgraph`` node;
    with grad, conveyor's capture records the op's autograd Function
    (``InvokeSubgraphAutogradOp``) like a user's and runs its backward at run time
    (Note [A Function's backward at run time]), which asserts a fake mode.
    ``aot_eager`` compiles it (its joint trace traces that backward on fake tensors).
    Under ``conveyor.compile`` it compiles on 2.13 and 2.14 (the region is inlined)
    and fails alike on 2.11 and 2.12."""

    @torch.compiler.nested_compile_region
    def region(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.sin(x) * y

    def fn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return region(x, y) + region(x, y).cos()

    torch._dynamo.reset()
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=UserWarning)
            x, y = torch.randn(4, requires_grad=True), torch.randn(4, requires_grad=True)
            check(fn, x, y, compile=lambda f: torch.compile(f, backend="conveyor"))
    finally:
        torch._dynamo.reset()


@pytest.mark.slow
@pytest.mark.parametrize(("name", "entry", "grad"), [_param(*c) for c in CASES if c not in DEFAULT])
def test_hop_db_every_sample(name: str, entry: str, grad: bool) -> None:
    _run(name, entry, grad)


def test_hop_db_is_swept() -> None:
    names = {n for n, _ in ENTRIES}
    assert {"cond.simple", "while_loop.simple", "map.simple", "scan.simple", "invoke_subgraph.simple"} <= names
    # a default case names a hop this torch's hop_db has (register_hook is newer than torch 2.11)
    assert {c for c in CASES if c in DEFAULT} == {c for c in DEFAULT if c[0] in names}
