"""Mutation and aliasing cases ported from PyTorch's AOTAutograd tests.

Origin: pytorch/pytorch, test/functorch/test_aotdispatch.py, class
``TestAOTAutograd`` (the ``test_input_mutation_*``, ``test_output_aliases_*``,
``test_input_output_*``, ``test_*_metadata_mutation*``, ``test_set__*``,
``test_batchnorm*``, ``test_no_grad_*``, ``test_inference_mode``,
``test_view_and_inplace_view``, ``test_dupe_*``, ``test_output_op_depending_on_symint``
... cases). Each case below keeps the original test's name (without the
``test_`` prefix) and the program it compiles; the inputs are built as the
original builds them (``test_mutation=True`` there means the graph inputs are
non-leaves, ``x.add(1)``, so they may be mutated), with and without
``requires_grad`` where the original runs both.

Instead of ``aot_function`` + ``verify_aot_autograd`` (and the expected
graphs, which are AOTAutograd's own), every case runs through
``conveyor.compile`` with the full installed pipeline and the eager backend,
and is compared with eager by ``conveyor.testing.check`` (outputs, output /
input aliasing, inputs after the call, gradients of the leaves behind the
inputs). Where the original goes on to mutate the outputs it got back
(``test_mutation=True``), ``check_output_mutation`` does the same on both
sides and compares again. Each case is checked twice on one compiled
function (the second call runs the cached specialization), and once more
under ``torch.no_grad()`` and ``torch.inference_mode()`` (``test_case_grad_mode``).

Cases named ``regression_*`` are not from PyTorch: each pins a bug these
cases (or random aliasing programs built from the same ingredients) found in
a stage, and says which.

Strict xfails name the stage at fault and the exact cause.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest
import torch
from conveyor.testing import check
from torch import nn

sys.path.insert(0, str(Path(__file__).parent))
import aotdispatch_inputs  # noqa: E402,F401  (each module registers its cases)
import aotdispatch_more  # noqa: E402,F401
import aotdispatch_outputs  # noqa: E402,F401
from aotdispatch_harness import CASES, compile_eager, nonleaf, run  # noqa: E402,F401

# Expected failures: "<case>-grad" / "<case>-nograd" -> reason (strict xfail).
# (requires_grad_(), detach_() and .data = inside the program run eagerly with a
# warning: Note [Autograd state changed by the program] in conveyor.frontend.autograd_state.)
XFAIL: dict[str, str] = {}


def _marked(ids: list[str], xfail: dict[str, str]) -> list[Any]:
    """One param per id, strict xfails where ``xfail`` names a reason."""
    assert set(xfail) <= set(ids), set(xfail) - set(ids)
    return [
        pytest.param(i, id=i, marks=pytest.mark.xfail(strict=True, reason=xfail[i]))
        if i in xfail
        else pytest.param(i, id=i)
        for i in ids
    ]


def _params() -> list[Any]:
    return _marked([f"{n}-{'grad' if rg else 'nograd'}" for n in sorted(CASES) for rg in CASES[n][2]], XFAIL)


@pytest.mark.parametrize("case_id", _params())
def test_case(case_id: str) -> None:
    name, _, grad = case_id.rpartition("-")
    fn, make, _ = CASES[name]
    run(fn, make, (grad == "grad",))


# The same programs called under torch.no_grad() and torch.inference_mode()
# (the original's test_grad_context / test_inference_mode, for every case):
# with inputs requiring grad where the case has them.
_MODES = {"no_grad": torch.no_grad, "inference_mode": torch.inference_mode}
_MODE_XFAIL: dict[str, str] = {}


def _mode_params() -> list[Any]:
    return _marked([f"{m}-{n}" for m in _MODES for n in sorted(CASES)], _MODE_XFAIL)


@pytest.mark.parametrize("case_id", _mode_params())
def test_case_grad_mode(case_id: str) -> None:
    mode, _, name = case_id.partition("-")
    fn, make, req_grads = CASES[name]
    with _MODES[mode]():
        torch.manual_seed(0)
        check(fn, *make(max(req_grads)), compile=compile_eager)


# -- cases that need more than ``run`` --------------------------------------


class _Foo(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x

    @staticmethod
    def backward(ctx, gx):
        return gx * 0.5


@pytest.mark.filterwarnings("ignore:conveyor. running .* eagerly")
def test_input_output_aliase_custom_autograd_function() -> None:
    def f(x):
        return _Foo.apply(x)

    check(f, torch.ones(2, 2, requires_grad=True), compile=compile_eager)


class _CustomFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x.clone()

    @staticmethod
    def backward(ctx, grad_output):
        return grad_output + 1


@pytest.mark.filterwarnings("ignore:conveyor. running .* eagerly")
def test_custom_autograd() -> None:
    def f(x):
        return _CustomFn.apply(x)

    check(f, torch.randn(3), compile=compile_eager)
    check(f, torch.randn(3, requires_grad=True), compile=compile_eager)


def test_input_mutation_modifies_autograd_meta_of_aliases_view_seen_after() -> None:
    """The original's second half: a view of the input taken *before* the
    call sees the mutation, and gradients through it agree."""

    def f(a):
        a.mul_(2)
        out = a + 1
        return out.detach()

    sides = []
    for fn in (f, compile_eager(f)):
        x = torch.ones(3, 3, requires_grad=True)
        xc = x.clone()
        view = xc.view(3, 3)
        fn(xc)
        (xc * view).sum().backward()
        sides.append((view.detach().clone(), view._version, type(view.grad_fn).__name__, x.grad))
    (ev, ever, efn, eg), (cv, cver, cfn, cg) = sides
    torch.testing.assert_close(cv, ev)
    assert cfn == efn
    torch.testing.assert_close(cg, eg)


def test_batchnorm_training_module() -> None:
    check(nn.BatchNorm2d(4), torch.ones(1, 4, 2, 2), compile=compile_eager)


def test_batchnorm_inference() -> None:
    m = nn.BatchNorm2d(4).eval()
    with torch.no_grad():
        check(m, torch.randn(4, 4, 4, 4), compile=compile_eager)
    check(m, torch.randn(4, 4, 4, 4, requires_grad=True), compile=compile_eager)


def test_inference_mode() -> None:
    m = nn.Linear(4, 4)
    inp = torch.randn(4, 4)
    compiled = compile_eager(m)
    with torch.inference_mode():
        out_ref = m(inp)
        out_test = compiled(inp)
    torch.testing.assert_close(out_test, out_ref)


def test_inference_mode_checker() -> None:
    with torch.inference_mode():
        check(nn.Linear(4, 4), torch.randn(4, 4), compile=compile_eager)


def test_no_grad_mode_mutation_of_input() -> None:
    def f(a, b):
        a.mul_(2)
        return a + b, b.view(-1)

    with torch.no_grad():
        check(f, *nonleaf((3, 3), (3, 3), req_grad=True), compile=compile_eager)


class _BufferModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("buf", torch.zeros(1))
        self.w1 = nn.Parameter(torch.zeros(1))
        self.w2 = nn.Parameter(torch.zeros(1))

    def forward(self, x):
        self.buf.add_(1)
        return (self.w1 * x * self.w2).sum() + self.buf.sum()


class _BufferModelShapes(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("buf", torch.ones(4, 4))
        self.w = nn.Parameter(torch.tensor([[4.0, 5], [1, 2], [6, 7], [8, 9]]))

    def forward(self, x):
        self.buf.add_(1)
        return (self.w @ x).sum() + self.buf.sum()


class _BufferBatchNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.m = nn.BatchNorm1d(100)

    def forward(self, x):
        return self.m(x)


class _BufferMutationMetadata(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("foo", torch.zeros(2, 2))

    def forward(self, x):
        self.foo.add_(4)
        return (x.sum() + self.foo.sum(),)


def test_buffer_batch_norm() -> None:
    check(_BufferBatchNorm(), torch.ones(20, 100, requires_grad=True).clone(), compile=compile_eager)


def test_aot_export_predispatch_buffer_mutation_metadata() -> None:
    check(_BufferMutationMetadata(), torch.randn(2, 2), compile=compile_eager)
    check(_BufferMutationMetadata(), torch.randn(2, 2, requires_grad=True), compile=compile_eager)


def test_aot_export_predispatch_func_composite_implicit_under_no_grad() -> None:
    with torch.no_grad():
        check(
            aotdispatch_more._aot_export_predispatch_func_composite_implicit,
            torch.randn(2, 2, requires_grad=True),
            compile=compile_eager,
        )


def test_buffer_copied_in_graph() -> None:
    check(_BufferModel(), torch.ones(1, requires_grad=True).clone(), compile=compile_eager)


def test_buffer_copied_in_graph_with_different_shapes() -> None:
    check(_BufferModelShapes(), torch.ones(2, 4, requires_grad=True).clone(), compile=compile_eager)
