"""Note [Gradients added in place at once]: gradients kept between steps are
added to in place by one ``_foreach_add_``, exactly as eager's
``AccumulateGrad`` adds them; anything unusual takes torch's accumulation."""

from __future__ import annotations

import copy
from typing import Any

import conveyor_compiled_autograd as cca
import pytest
import torch
from ca_helpers import mlp
from conveyor_compiled_autograd import inplace
from torch import nn
from torch._dynamo import compiled_autograd as ca
from torch.utils._python_dispatch import TorchDispatchMode

pytestmark = pytest.mark.skipif(
    inplace._foreach_add_ is None or inplace._get_grad is None, reason="this torch has no _foreach_add_ or TensorBase.grad"
)


def _loss(model: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return model(x).pow(2).sum()


def _counted(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = inplace._foreach_add_

    def counted(currents: Any, grads: Any) -> None:
        calls.append(len(currents))
        real(currents, grads)  # type: ignore[misc]

    monkeypatch.setattr(inplace, "_foreach_add_", counted)
    return calls


def _steps(model: nn.Module, ref: nn.Module, xs: list[torch.Tensor], observe: Any = None) -> None:
    """Gradients kept over the steps (gradient accumulation), each step compared with eager."""
    with cca.enable():
        for x in xs:
            kept = [p.grad for p in model.parameters()]
            with observe() if observe is not None else _nothing():
                _loss(model, x).backward()
            with ca._disable():
                _loss(ref, x).backward()
            for p, r, k in zip(model.parameters(), ref.parameters(), kept, strict=True):
                torch.testing.assert_close(p.grad, r.grad, rtol=0, atol=0)
                assert p.grad.stride() == r.grad.stride()
                if k is not None:
                    assert p.grad is k  # added in place, as eager does


def _passes_current_grad() -> bool:
    import inspect

    from torch._dynamo.external_utils import call_accumulate_grad

    return "variable_grad" in inspect.signature(call_accumulate_grad).parameters


class _nothing:
    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> None:
        return None


def test_kept_gradients_are_added_in_place_at_once_as_eager_adds_them(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _counted(monkeypatch)
    ref = mlp()
    model = copy.deepcopy(ref)
    xs = [torch.randn(5, 4) for _ in range(4)]
    _steps(model, ref, xs)
    if not _passes_current_grad():
        assert calls == []  # torch 2.11 / 2.12: the capture does not pass the current gradient
        return
    assert calls == [len(list(model.parameters()))] * (len(xs) - 1)  # each step with a .grad: one add of all


def test_a_dispatch_mode_sees_eagers_adds_not_a_foreach(monkeypatch: pytest.MonkeyPatch) -> None:
    """Under a dispatch mode, the run goes one accumulation at a time: the
    mode sees ``add_``, as with eager, and no ``_foreach_add_``."""
    calls = _counted(monkeypatch)
    seen: list[str] = []

    class Names(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            seen.append(str(func))
            return func(*args, **(kwargs or {}))

    ref = mlp()
    model = copy.deepcopy(ref)
    xs = [torch.randn(5, 4) for _ in range(3)]
    _steps(model, ref, xs[:2])  # captured and compiled, gradients kept
    before = len(calls)
    _steps(model, ref, xs[2:], observe=Names)
    assert len(calls) == before
    assert not any("_foreach" in name for name in seen)


def test_a_replaced_grad_takes_torchs_accumulation(monkeypatch: pytest.MonkeyPatch) -> None:
    """A ``.grad`` that is not the tensor the engine lifted (a hook replaced
    it during the backward) sends the run one by one."""
    calls = _counted(monkeypatch)
    ref = mlp()
    model = copy.deepcopy(ref)
    x = torch.randn(5, 4)
    _steps(model, ref, [x, x])
    base = len(calls)
    first = next(iter(model.parameters()))
    first_ref = next(iter(ref.parameters()))

    def replace(_: torch.Tensor) -> None:  # runs during the backward, before the accumulations
        first.grad = first.grad.clone()
        first_ref.grad = first_ref.grad.clone()

    out = model[0](x)
    out.register_hook(replace)
    with cca.enable():
        model[2](model[1](out)).pow(2).sum().backward()
    out_ref = ref[0](x)
    out_ref.register_hook(replace)
    with ca._disable():
        ref[2](ref[1](out_ref)).pow(2).sum().backward()
    for p, r in zip(model.parameters(), ref.parameters(), strict=True):
        torch.testing.assert_close(p.grad, r.grad, rtol=0, atol=0)
    if _passes_current_grad():
        # the head's two accumulations run before the hook, at once; the first layer's run, after
        # it, finds a .grad that is not the one the engine lifted and goes one by one
        assert calls[base:] == [2]


def test_a_double_gradient_run_is_decided_again() -> None:
    """A run decided for float32 is checked again (``TensorGuards``) when the
    parameters become float64: still eager's values, in place."""
    ref = mlp()
    model = copy.deepcopy(ref)
    xs = [torch.randn(5, 4) for _ in range(2)]
    _steps(model, ref, xs)
    for m in (model, ref):
        m.double()
        m.zero_grad(set_to_none=False)
    _steps(model, ref, [x.double() for x in xs])
