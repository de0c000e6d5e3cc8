"""What a capture watches without patching torch (issue 21): seeding by a
profile hook of the capturing thread (Note [Watching seeding without patching
torch]), custom Functions by a wrapper of ``Function.apply`` that only a
capturing thread sees through (Note [Why Function.apply is still wrapped])."""

from __future__ import annotations

import cProfile
import sys
import threading
import warnings
from collections.abc import Callable
from operator import attrgetter
from typing import Any

import conveyor
import pytest
import torch
from torch.overrides import TorchFunctionMode

# torch.manual_seed itself is dynamo's wrapper once torch._dynamo is imported
SEEDING = ("torch.manual_seed", "torch.seed", "torch.set_rng_state", "torch.random.manual_seed", "torch.cuda.manual_seed")
EAGERLY = r"conveyor: running .* eagerly: it "


def _same_as_eager_twice(f: Callable[[torch.Tensor], torch.Tensor], seed: int = 0) -> None:
    """Compiled and eager agree on two calls in a row, each after the
    caller's ``manual_seed(seed)`` (eager reseeds inside, every call)."""
    compiled = conveyor.compile(f)
    for _ in range(2):
        torch.manual_seed(seed)
        expected = f(torch.zeros(3))
        torch.manual_seed(seed)
        torch.testing.assert_close(compiled(torch.zeros(3)), expected)


def test_seeding_functions_are_torch_own_while_a_program_is_captured() -> None:
    import torch._dynamo  # noqa: F401 - wraps torch.manual_seed on import, which a capture may cause

    before = {name: _current(name) for name in SEEDING}

    def f(x: torch.Tensor) -> torch.Tensor:
        changed = [name for name in SEEDING if _current(name) is not before[name]]
        if changed:
            raise AssertionError(f"replaced during the capture: {changed}")
        return x + 1

    with warnings.catch_warnings():
        warnings.simplefilter("error")  # compiled, not run eagerly
        conveyor.compile(f)(torch.zeros(3))
    assert {name: _current(name) for name in SEEDING} == before


def _current(name: str) -> Any:
    return attrgetter(name.removeprefix("torch."))(torch)


def test_reseeding_to_the_state_the_generator_already_has_runs_eagerly() -> None:
    """``manual_seed(0)`` right after the caller's: nothing changes that a
    comparison of states could see, but eager reseeds on every call."""

    def f(x: torch.Tensor) -> torch.Tensor:
        torch.manual_seed(0)
        return x + torch.rand(3)

    with pytest.warns(UserWarning, match=EAGERLY + "calls torch.manual_seed"):
        _same_as_eager_twice(f)


def test_setting_the_current_rng_state_runs_eagerly() -> None:
    state = torch.get_rng_state()

    def f(x: torch.Tensor) -> torch.Tensor:
        torch.set_rng_state(state)
        return x + torch.rand(3)

    with pytest.warns(UserWarning, match=EAGERLY + "calls torch.set_rng_state"):
        compiled = conveyor.compile(f)
        torch.set_rng_state(state)
        expected = f(torch.zeros(3))
        torch.set_rng_state(state)
        torch.testing.assert_close(compiled(torch.zeros(3)), expected)
        torch.testing.assert_close(compiled(torch.zeros(3)), expected)


def test_a_seeding_function_bound_before_the_compile_is_seen() -> None:
    from torch import manual_seed as reseed

    def f(x: torch.Tensor) -> torch.Tensor:
        reseed(5)
        return x + torch.rand(3)

    with pytest.warns(UserWarning, match=EAGERLY + "calls torch.manual_seed"):
        _same_as_eager_twice(f)


def test_a_default_generators_state_set_back_in_the_program_runs_eagerly() -> None:
    """Note [A generator's state in the program]: ``Generator.get_state`` and
    ``set_state`` are C methods the seeding functions' watch never saw; the
    graph redrew ``y`` instead of repeating ``x`` (h_misc, session 13)."""

    def f(t: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        state = torch.default_generator.get_state()
        x = torch.rand(3)
        torch.default_generator.set_state(state)
        return x + t, torch.rand(3)

    with pytest.warns(UserWarning, match=EAGERLY + "calls torch.Generator.get_state"):
        compiled = conveyor.compile(f)
        for _ in range(2):
            x, y = compiled(torch.zeros(3))
            torch.testing.assert_close(x, y)


@pytest.mark.parametrize("where", ["default", "made", "argument"])
def test_a_generator_seeded_in_the_program_runs_eagerly(where: str) -> None:
    """A generator's ``manual_seed`` in the program (the default one, one it
    makes, one it is given): eager draws the same numbers on every call, the
    graph drew new ones from the second call on."""

    def f(x: torch.Tensor, g: torch.Generator | None) -> torch.Tensor:
        if where == "default":
            torch.default_generator.manual_seed(5)
            return x + torch.randn(3)
        gen = torch.Generator() if where == "made" else g
        gen.manual_seed(3)
        return x + torch.randn(3, generator=gen)

    g = torch.Generator()
    with pytest.warns(UserWarning, match=EAGERLY + "calls torch.Generator.manual_seed"):
        compiled = conveyor.compile(f)
        expected = f(torch.zeros(3), g)
        for _ in range(2):
            torch.testing.assert_close(compiled(torch.zeros(3), g), expected)


def test_cuda_seeding_runs_eagerly() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        torch.cuda.manual_seed(3)
        return x + 1

    with pytest.warns(UserWarning, match=EAGERLY + "calls torch.cuda.manual_seed"):
        conveyor.compile(f)(torch.zeros(3))


def test_draws_before_a_reseed_come_from_the_callers_state() -> None:
    """The refusal comes before the call runs: the eager run that follows
    draws from the caller's generator, as eager would."""

    def f(x: torch.Tensor) -> torch.Tensor:
        first = torch.rand(3)
        torch.manual_seed(9)
        return x + first + torch.rand(3)

    with pytest.warns(UserWarning, match=EAGERLY + "calls torch.manual_seed"):
        _same_as_eager_twice(f, seed=1)


def test_a_program_that_swallows_the_refusal_still_runs_eagerly() -> None:
    def f(x: torch.Tensor) -> torch.Tensor:
        try:
            torch.manual_seed(4)
        except Exception:  # noqa: BLE001 - the program's own choice
            pass
        return x + torch.rand(3)

    with pytest.warns(UserWarning, match=EAGERLY + "calls torch.manual_seed"):
        _same_as_eager_twice(f)


def test_another_threads_seeding_and_draws_during_a_capture_change_nothing() -> None:
    """The generators are the process's: another thread reseeding and
    drawing while this one traces is not this program reseeding."""
    started, done = threading.Event(), threading.Event()
    drawn: list[Any] = []

    def other_thread() -> None:
        started.wait(30)
        try:
            for seed in (7, 7, 8):
                torch.manual_seed(seed)
                drawn.append(torch.rand(2))
        except BaseException as exc:  # asserted below
            drawn.append(exc)
        done.set()

    def program(x: torch.Tensor) -> torch.Tensor:
        started.set()
        done.wait(30)
        return x * 2

    worker = threading.Thread(target=other_thread)
    worker.start()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no eager fallback
        out = conveyor.compile(program)(torch.ones(2))
    worker.join(30)
    torch.testing.assert_close(out, torch.full((2,), 2.0))
    assert all(isinstance(t, torch.Tensor) for t in drawn) and len(drawn) == 3
    torch.testing.assert_close(drawn[0], drawn[1])
    assert torch.initial_seed() == 8


def test_a_reseeding_capture_in_another_thread_leaves_this_threads_seeding_alone() -> None:
    started, done = threading.Event(), threading.Event()
    caught: list[Warning | BaseException] = []

    def program(x: torch.Tensor) -> torch.Tensor:
        started.set()
        done.wait(30)
        torch.manual_seed(1)
        return x + 1

    def other_thread() -> None:
        try:
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                conveyor.compile(program)(torch.zeros(2))
            caught.extend(w.message for w in seen)
        except BaseException as exc:  # asserted below
            caught.append(exc)

    worker = threading.Thread(target=other_thread)
    worker.start()
    started.wait(30)
    torch.manual_seed(6)  # while the other thread captures
    assert torch.initial_seed() == 6
    done.set()
    worker.join(30)
    assert any("calls torch.manual_seed" in str(w) for w in caught), caught


def test_a_python_profile_function_keeps_seeing_calls_during_a_capture() -> None:
    calls: list[str] = []

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_name == "program":
            calls.append("program")

    def program(x: torch.Tensor) -> torch.Tensor:
        torch.manual_seed(2)
        return x + 1

    sys.setprofile(profile)
    try:
        with pytest.warns(UserWarning, match=EAGERLY + "calls torch.manual_seed"):
            conveyor.compile(program)(torch.zeros(2))
        assert sys.getprofile() is profile
    finally:
        sys.setprofile(None)
    assert calls.count("program") >= 2  # traced, then run eagerly


def test_under_cprofile_a_reseed_is_seen_by_the_generators_state() -> None:
    """cProfile's hook cannot be handed back from Python, so it stays and the
    capture compares the generator's state instead (Note [Watching seeding
    without patching torch])."""

    def f(x: torch.Tensor) -> torch.Tensor:
        first = torch.rand(3)
        torch.manual_seed(9)
        return x + first + torch.rand(3)

    profiler = cProfile.Profile()
    profiler.enable()
    try:
        with pytest.warns(UserWarning, match=EAGERLY + "reseeds torch's default generator"):
            _same_as_eager_twice(f, seed=1)
        still = sys.getprofile()
    finally:
        profiler.disable()
    assert still is profiler


def test_apply_is_torch_own_outside_captures() -> None:
    original = torch.autograd.Function.__dict__["apply"]

    class Double(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            return x * 2

        @staticmethod
        def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
            return g * 3

    def f(x: torch.Tensor) -> torch.Tensor:
        assert torch.autograd.Function.__dict__["apply"] is not original  # the capture's wrapper
        return Double.apply(x) + 1

    x = torch.ones(2, requires_grad=True)
    conveyor.compile(f)(x).sum().backward()
    assert torch.autograd.Function.__dict__["apply"] is original
    torch.testing.assert_close(x.grad, torch.full((2,), 3.0))


def test_a_function_mode_still_does_not_see_apply() -> None:
    """Note [Why Function.apply is still wrapped]: should torch route
    ``Function.apply`` through ``__torch_function__``, this fails, and the
    wrapper could give way to a mode."""
    seen: list[str] = []

    class Names(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            seen.append(getattr(func, "__name__", repr(func)))
            return func(*args, **(kwargs or {}))

    class Double(torch.autograd.Function):
        @staticmethod
        def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
            return x * 2

        @staticmethod
        def backward(ctx: Any, g: torch.Tensor) -> torch.Tensor:
            return g

    x = torch.ones(2, requires_grad=True)
    with Names():
        Double.apply(x)
    assert seen == ["mul"]  # the forward's op, not apply
