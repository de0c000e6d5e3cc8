"""The harness of the AOTAutograd cases (``test_aotdispatch_cases.py``):
the case registry, input builders and the run that checks one case."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import conveyor
import pytest
import torch
import torch.utils._pytree as pytree
from conveyor.testing import check


def compile_eager(fn: Callable[..., Any]) -> Any:
    return conveyor.compile(fn, backend="eager")


# -- helpers ----------------------------------------------------------------


def nonleaf(*shapes_or_tensors: Any, req_grad: bool) -> list[torch.Tensor]:
    """``torch.ones(shape, requires_grad=req_grad).add(1)`` for each shape:
    graph inputs that may be mutated (what ``test_mutation=True`` builds)."""
    out = []
    for s in shapes_or_tensors:
        t = s if isinstance(s, torch.Tensor) else torch.ones(*s)
        out.append(t.detach().clone().requires_grad_(req_grad).add(1))
    return out


def check_output_mutation(fn: Callable[..., Any], make: Callable[[], list[Any]]) -> None:
    """Run eager and compiled on fresh inputs, then mutate every output in
    place (``mul_(2)``), as ``verify_aot_autograd(test_mutation=True)`` does;
    the outputs and inputs must agree afterwards, and an output that eager
    refuses to mutate must be refused by the compiled program too."""
    torch.manual_seed(0)
    e_in = make()
    torch.manual_seed(0)
    c_in = make()
    e_out = fn(*e_in)
    c_out = compile_eager(fn)(*c_in)
    e_flat, c_flat = pytree.tree_leaves(e_out), pytree.tree_leaves(c_out)
    assert len(e_flat) == len(c_flat)
    for i, (e, c) in enumerate(zip(e_flat, c_flat, strict=True)):
        if isinstance(e, torch.Tensor):  # before any mutation invalidates a multi-output view's grad_fn
            assert c.requires_grad == e.requires_grad, f"output {i}: requires_grad"
            assert c.is_leaf == e.is_leaf, f"output {i}: is_leaf {c.is_leaf} != eager {e.is_leaf}"
    for e, c in zip(e_flat, c_flat, strict=True):
        if not isinstance(e, torch.Tensor):
            continue
        try:
            e.mul_(2)
        except RuntimeError:
            with pytest.raises(RuntimeError):
                c.mul_(2)
            continue
        c.mul_(2)
    for i, (e, c) in enumerate(zip(e_flat, c_flat, strict=True)):
        if isinstance(e, torch.Tensor):
            torch.testing.assert_close(c.detach(), e.detach(), msg=lambda m, i=i: f"output {i} after mutation: {m}")
    for j, (e, c) in enumerate(zip(pytree.tree_leaves(e_in), pytree.tree_leaves(c_in), strict=True)):
        if isinstance(e, torch.Tensor):
            torch.testing.assert_close(c.detach(), e.detach(), msg=lambda m, j=j: f"input {j} after mutation: {m}")


def run(fn: Callable[..., Any], make: Callable[[bool], list[Any]], req_grads: tuple[bool, ...] = (False, True)) -> None:
    """The shared checker on ``make(req_grad)`` for each ``req_grad``, then the
    output-mutation check."""
    for rg in req_grads:
        compiled = compile_eager(fn)
        for _ in range(2):  # the second call runs the cached specialization
            torch.manual_seed(0)
            check(fn, *make(rg), compile=lambda _fn, compiled=compiled: compiled)
        check_output_mutation(fn, lambda rg=rg: make(rg))


# -- the programs ----------------------------------------------------------
# Each entry: name -> (fn, make_inputs(req_grad), req_grad values).

CASES: dict[str, tuple[Callable[..., Any], Callable[[bool], list[Any]], tuple[bool, ...]]] = {}


def case(name: str, make: Callable[[bool], list[Any]], req_grads: tuple[bool, ...] = (False, True)):
    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        assert name not in CASES, name
        CASES[name] = (fn, make, req_grads)
        return fn

    return register


def ones_nonleaf(*shapes: tuple[int, ...]) -> Callable[[bool], list[Any]]:
    return lambda rg: nonleaf(*shapes, req_grad=rg)


def ones_leaf(*shapes: tuple[int, ...]) -> Callable[[bool], list[Any]]:
    return lambda rg: [torch.ones(*s, requires_grad=rg) for s in shapes]


def randn_leaf(*shapes: tuple[int, ...]) -> Callable[[bool], list[Any]]:
    return lambda rg: [torch.randn(*s, requires_grad=rg) for s in shapes]


def two_views_of(rg: bool, shape: tuple[int, ...], views: Callable[[torch.Tensor], list[torch.Tensor]]) -> list[Any]:
    base = torch.ones(*shape, requires_grad=rg)
    return views(base.add(1))
