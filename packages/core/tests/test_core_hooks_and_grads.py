"""Note [Hooks and gradients a program reaches]: tensor hooks and ``.grad``
inside a compiled program behave as in eager, on both entry points (found
by sweeps of PyTorch's hook tests and of optimizer steps: the hooks were
silently dropped, ``conveyor.compile(opt.step)`` silently updated nothing)."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import conveyor
import pytest
import torch

ENTRIES: dict[str, Callable[[Callable[..., Any]], Any]] = {
    "conveyor": conveyor.compile,
    "dynamo": lambda f: torch.compile(f, backend="conveyor"),
}


@pytest.fixture(autouse=True)
def _fresh() -> None:
    torch._dynamo.reset()


def _quiet(fn: Callable[..., Any], *args: Any) -> Any:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="conveyor: ", category=UserWarning)
        return fn(*args)


def _hook_on_intermediate(x: torch.Tensor) -> torch.Tensor:
    y = x * 2
    y.register_hook(lambda g: g + 1)
    return y.sum()


def _hook_on_input(x: torch.Tensor) -> torch.Tensor:
    x.register_hook(lambda g: g * 3)
    return (x * 2).sum()


def _retain_grad(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = x * 2
    y.retain_grad()
    return y.sum(), y


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize("program", [_hook_on_intermediate, _hook_on_input], ids=["intermediate", "input"])
def test_a_hook_the_program_registers_runs_in_the_backward(program: Any, entry: str) -> None:
    x, ref = torch.zeros(3, requires_grad=True), torch.zeros(3, requires_grad=True)
    _quiet(ENTRIES[entry](program), x).backward()
    program(ref).backward()
    torch.testing.assert_close(x.grad, ref.grad)


@pytest.mark.parametrize("entry", ENTRIES)
def test_retain_grad_keeps_the_intermediates_gradient(entry: str) -> None:
    x, ref = torch.ones(3, requires_grad=True), torch.ones(3, requires_grad=True)
    loss, y = _quiet(ENTRIES[entry](_retain_grad), x)
    loss.backward()
    ref_loss, ref_y = _retain_grad(ref)
    ref_loss.backward()
    assert y.grad is not None
    torch.testing.assert_close(y.grad, ref_y.grad)


def _sgd(entry: str, optimizer: Callable[[Any], torch.optim.Optimizer]) -> None:
    torch.manual_seed(0)
    lin, ref = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    ref.load_state_dict(lin.state_dict())
    opt, ref_opt = optimizer(lin.parameters()), optimizer(ref.parameters())
    step = ENTRIES[entry](opt.step)
    for _ in range(3):
        for m in (lin, ref):
            m.zero_grad()
            m(torch.ones(1, 3)).sum().backward()
        _quiet(step)
        ref_opt.step()
        for p, q in zip(lin.parameters(), ref.parameters(), strict=True):
            torch.testing.assert_close(p, q)


@pytest.mark.parametrize("entry", ENTRIES)
@pytest.mark.parametrize(
    "optimizer",
    [lambda ps: torch.optim.SGD(ps, lr=0.1), lambda ps: torch.optim.Adam(ps, lr=0.1, foreach=False)],
    ids=["sgd", "adam"],
)
def test_a_compiled_optimizer_step_reads_the_gradients(entry: str, optimizer: Any) -> None:
    _sgd(entry, optimizer)


def test_setting_grad_inside_the_program_is_seen_by_the_caller() -> None:
    w = torch.nn.Parameter(torch.ones(3))
    w.grad = torch.full((3,), 2.0)

    def clear(p: torch.Tensor) -> torch.Tensor:
        p.grad = None
        return p * 2

    with pytest.warns(UserWarning, match=r"through dynamo.*\.grad"):
        conveyor.compile(clear)(w)
    assert w.grad is None


@pytest.mark.parametrize("entry", ENTRIES)
def test_saved_tensor_hooks_around_a_compiling_call_never_see_a_fake(entry: str) -> None:
    """Note [Saved-tensor hooks while tracing]: the capture and every stage's
    trace run with the caller's hooks hidden; the program's saves at run
    time reach them."""
    from torch._subclasses.fake_tensor import FakeTensor

    packed: list[torch.Tensor] = []

    def pack(t: torch.Tensor) -> torch.Tensor:
        packed.append(t)
        return t

    f = ENTRIES[entry](lambda a: (a * a).sin().sum())
    a = torch.randn(5, requires_grad=True)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = f(a)
    y.backward()
    assert packed and not any(isinstance(t, FakeTensor) for t in packed)
    torch.testing.assert_close(a.grad, 2 * a.detach() * torch.cos(a.detach() ** 2))


def test_a_function_calling_a_module_it_closes_over_follows_its_mode_and_hooks() -> None:
    """Note [Modules a function reaches]: ``eval()`` and a forward hook added
    after the first call compile again, as for a compiled module."""
    torch.manual_seed(0)
    bn = torch.nn.BatchNorm1d(3)
    lin = torch.nn.Linear(3, 3)
    f = conveyor.compile(lambda x: lin(bn(x)))
    x = torch.randn(4, 3)
    torch.testing.assert_close(f(x), lin(bn(x)))
    bn.eval()
    torch.testing.assert_close(f(x), lin(bn(x)))
    handle = lin.register_forward_hook(lambda m, i, o: o * 2)
    torch.testing.assert_close(f(x), lin(bn(x)))
    handle.remove()
    bn.train()
    torch.testing.assert_close(f(x), lin(bn(x)))
    assert f.compiles == 3


def test_hooks_a_first_call_installs_are_not_left_twice_by_the_capture() -> None:
    """A module that installs forward hooks on its submodules on its first
    call (transformers' output capturing) runs eagerly, with a warning; the
    capture puts its hook dicts back, so the hooks are installed once."""

    class Installs(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lin = torch.nn.Linear(3, 3)
            self.installed = False

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            if not self.installed:
                self.lin.register_forward_hook(lambda m, i, o: o + 1)
                self.installed = True
            return self.lin(x)

    torch.manual_seed(0)
    m = Installs()
    x = torch.randn(2, 3)
    with pytest.warns(UserWarning, match="eagerly"):
        got = conveyor.compile(m)(x)
    assert len(m.lin._forward_hooks) == 1
    torch.testing.assert_close(got, m.lin(x))


def _step_backwarding_a_module(model: torch.nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    def step(x: torch.Tensor) -> torch.Tensor:
        loss = model(x).sum()
        loss.backward()
        return loss.detach()

    return step


def _gan_step(a: torch.Tensor, b: torch.Tensor) -> None:
    """test_repros' GAN step: backward of the generator's loss, then of the
    discriminator's through ``e.detach()`` (h_sweep4 B1, B2)."""
    e = torch.matmul(a, torch.ones(2, 2))
    torch.abs(e - torch.ones(2, 2)).mean().backward()
    torch.matmul(b, e.detach()).mean().backward()


@pytest.mark.parametrize("entry", ENTRIES)
def test_backward_inside_the_program_accumulates_into_the_callers_grads(entry: str) -> None:
    """Before: ``conveyor.compile`` traced ``loss.backward()`` on stand-ins and
    every ``.grad`` stayed ``None``, silently."""
    torch.manual_seed(0)
    model, ref = torch.nn.Linear(3, 2), torch.nn.Linear(3, 2)
    ref.load_state_dict(model.state_dict())
    x = torch.randn(4, 3)
    for _ in range(2):
        torch.testing.assert_close(_quiet(ENTRIES[entry](_step_backwarding_a_module(model)), x), _step_backwarding_a_module(ref)(x))
        torch.testing.assert_close(model.weight.grad, ref.weight.grad)
    a0, b0 = torch.randn(2, 2), torch.randn(2, 2)
    a, b, ra, rb = (t.clone().requires_grad_() for t in (a0, b0, a0, b0))
    _quiet(ENTRIES[entry](_gan_step), a, b)
    _gan_step(ra, rb)
    torch.testing.assert_close((a.grad, b.grad), (ra.grad, rb.grad))


@pytest.mark.parametrize("entry", ENTRIES)
def test_a_leaf_the_program_makes_requires_grad_and_gets_its_gradient(entry: str) -> None:
    """Note [Leaves the program makes]: before, ``conveyor.compile`` returned
    the leaf and the value computed from it not requiring grad (h_sweep4 B3)."""

    def f(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        leaf = torch.ones(2, requires_grad=True)
        return leaf, leaf * 2 + x.sum()

    leaf, out = _quiet(ENTRIES[entry](f), torch.randn(2, 2))
    assert leaf.requires_grad and leaf.is_leaf and out.requires_grad
    out.sum().backward()
    torch.testing.assert_close(leaf.grad, torch.full((2,), 2.0))
