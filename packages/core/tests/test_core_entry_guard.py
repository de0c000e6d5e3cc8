"""Note [A guard per entry] and Note [Module state per call]: a call reuses a
compiled entry through its guard only when the full key would have chosen
that entry; every other call takes the full key (and compiles where it must),
so the result is eager's."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import conveyor
import pytest
import torch
from conveyor.analysis.signature import CallSignature
from conveyor.frontend import capture
from conveyor.runtime.entry_guard import EntryGuard


def _no_rekey(compiled: conveyor.Compiled, monkeypatch: pytest.MonkeyPatch) -> None:
    """From now on the full key is an error: calls must be served by guards."""

    def fail(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("the full key was computed: no guard held")

    monkeypatch.setattr(compiled, "_key", fail)


def test_a_warm_call_is_served_by_its_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    torch.manual_seed(0)
    module = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4), torch.nn.GELU())
    compiled = conveyor.compile(module)
    x = torch.randn(2, 4)
    compiled(x)
    compiled(x)  # capture swapped the parameters in and out: the state is read again once
    _no_rekey(compiled, monkeypatch)
    for _ in range(3):
        torch.testing.assert_close(compiled(torch.randn(2, 4).mul_(0).add_(x)), module(x))
    linear = module[0]
    assert isinstance(linear, torch.nn.Linear)
    with torch.no_grad():
        linear.weight.add_(1.0)  # values change, nothing the key holds
    torch.testing.assert_close(compiled(x), module(x))
    assert compiled.compiles == 1


def test_keyword_arguments_and_constants_are_served_by_guards_too(monkeypatch: pytest.MonkeyPatch) -> None:
    def f(x: torch.Tensor, *, scale: float, shift: torch.Tensor) -> torch.Tensor:
        return x * scale + shift

    compiled = conveyor.compile(f)
    x, shift = torch.randn(3), torch.randn(3)
    compiled(x, scale=2.0, shift=shift)
    _no_rekey(compiled, monkeypatch)
    torch.testing.assert_close(compiled(x, scale=2.0, shift=shift), x * 2.0 + shift)
    monkeypatch.undo()
    torch.testing.assert_close(compiled(x, scale=3.0, shift=shift), x * 3.0 + shift)  # another constant
    assert compiled.compiles == 2


def _calls() -> list[tuple[str, Callable[..., Any], Callable[[], tuple[Any, ...]], Callable[[], tuple[Any, ...]]]]:
    """(name, program, first call's arguments, a second call's arguments
    differing in one thing the guard must see)."""

    def add_into(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a.add_(1.0)
        return a * b

    def scaled(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a.mul_(2.0) + b

    def as_strided(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return a.as_strided((2,), (1,)) + b

    base = torch.arange(6.0)

    return [
        ("the same tensor twice", add_into, lambda: (torch.ones(3), torch.ones(3)), lambda: (lambda t: (t, t))(torch.ones(3))),
        ("views of one base", add_into, lambda: (torch.ones(3), torch.ones(3)), lambda: (lambda t: (t[:3], t[1:]))(torch.ones(4))),
        ("storage offset", as_strided, lambda: (base.clone()[:2], torch.ones(2)), lambda: (base.clone()[2:4], torch.ones(2))),
        ("a non-leaf that requires grad", scaled, lambda: (torch.ones(2).requires_grad_() * 1, torch.ones(2)), lambda: (torch.ones(2, requires_grad=True), torch.ones(2))),
        ("strides", add_into, lambda: (torch.ones(2, 2), torch.ones(2, 2)), lambda: (torch.ones(2, 2).t(), torch.ones(2, 2))),
    ]


@pytest.mark.parametrize("case", _calls(), ids=[c[0] for c in _calls()])
def test_a_call_that_differs_in_what_the_guard_checks_is_eagers(
    case: tuple[str, Callable[..., Any], Callable[[], tuple[Any, ...]], Callable[[], tuple[Any, ...]]],
) -> None:
    _, fn, first, second = case
    compiled = conveyor.compile(fn)
    for make in (first, first, second, second, first):
        eager_args, compiled_args = make(), make()
        try:
            expected: Any = fn(*eager_args)
        except RuntimeError as exc:  # an in-place op on a leaf that requires grad
            with pytest.raises(RuntimeError, match=str(exc).split(":")[0][:40]):
                compiled(*compiled_args)
            continue
        got = compiled(*compiled_args)
        torch.testing.assert_close(got, expected)
        for a, b in zip(compiled_args, eager_args, strict=True):
            torch.testing.assert_close(a, b)


def test_grad_mode_and_autocast_choose_another_entry() -> None:
    w = torch.nn.Parameter(torch.randn(4, 4))

    def f(x: torch.Tensor) -> torch.Tensor:
        return x @ w

    compiled = conveyor.compile(f)
    x = torch.randn(2, 4)
    assert compiled(x).requires_grad
    with torch.no_grad():
        assert not compiled(x).requires_grad
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert compiled(x).dtype == torch.bfloat16
    assert compiled(x).dtype == torch.float32 and compiled(x).requires_grad


def test_training_flags_flip_the_entry() -> None:
    module = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Dropout(p=1.0))
    compiled = conveyor.compile(module)
    x = torch.randn(2, 3)
    for _ in range(2):
        assert (compiled(x) == 0).all()  # training: dropout zeroes everything
        module.eval()
        torch.testing.assert_close(compiled(x), module(x))
        module.train()
    assert compiled.compiles == 2


def test_without_dict_version_tags_changes_are_still_seen(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(capture, "dict_tags", capture._dict_tags(versions=False))
    module = torch.nn.Linear(3, 2)
    compiled = conveyor.compile(module)
    x = torch.randn(4, 3)
    torch.testing.assert_close(compiled(x), module(x))
    module.weight = torch.nn.Parameter(torch.randn(2, 3))  # same metadata: values read fresh
    torch.testing.assert_close(compiled(x), module(x))
    module.bias = None  # type: ignore[assignment]
    torch.testing.assert_close(compiled(x), module(x))
    module.eval()
    torch.testing.assert_close(compiled(x), module(x))
    assert compiled.compiles == 3  # the first, without bias, and in eval mode


def test_the_state_list_is_kept_until_a_dict_changes() -> None:
    module = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.ReLU())
    state = capture.ModuleState(module)
    first, version = state.tensors(), state.version
    assert state.tensors() is first and state.version == version
    module.train()  # the same flag again: nothing written
    assert state.tensors() is first
    module[0].weight.requires_grad_(False)  # the tensor's own state: the list stands, its guard decides
    assert state.tensors() is first
    module[0].weight = torch.nn.Parameter(torch.ones(2, 2))
    now = state.tensors()
    assert now is not first and now[0] is module[0].weight and state.version == version + 1


def _guard(flat: Sequence[torch.Tensor], stages: Sequence[Callable[[CallSignature], Any]] = ()) -> EntryGuard:
    guard = EntryGuard.of(list(flat), (), CallSignature.of(list(flat)), stages, entry="entry")
    assert guard is not None
    return guard


def test_entry_guard_checks_what_tensor_guards_do_not() -> None:
    a, b = torch.randn(4), torch.randn(4, requires_grad=True)
    guard = _guard([a, b])

    def holds(*flat: torch.Tensor) -> bool:
        return guard.check(list(flat), (), CallSignature.of(list(flat)))

    assert holds(torch.randn(4), torch.randn(4, requires_grad=True))
    assert not holds(torch.randn(5)[1:], b)  # storage offset
    assert not holds(a, torch.randn(4, requires_grad=True) * 1)  # not a leaf
    assert not holds(a, a.detach().requires_grad_())  # one storage
    assert not holds(torch.nn.Parameter(a), b)  # another Python type
    assert not holds(a.double(), b)
    assert not holds(a.view(2, 2), b)


def test_entry_guard_of_shared_inputs_keeps_their_groups() -> None:
    base = torch.randn(6)
    guard = _guard([base[:3], base[3:], torch.randn(3)])
    other = torch.randn(6)
    flat = [other[:3], other[3:], torch.randn(3)]
    assert guard.check(flat, (), CallSignature.of(flat))
    flat = [other[:3], torch.randn(3), other[3:]]
    assert not guard.check(flat, (), CallSignature.of(flat))


def test_entry_guard_hands_the_stage_keys_the_calls_one_signature() -> None:
    seen: list[CallSignature] = []

    def stage_key(signature: CallSignature) -> Any:
        seen.append(signature)
        return signature.unshared

    a, b = torch.randn(2), torch.randn(2)
    guard = _guard([a, b], [stage_key])
    flat = [torch.randn(2), torch.randn(2)]
    signature = CallSignature.of(flat)
    assert guard.check(flat, (), signature)
    assert seen[-1] is signature and signature.groups == (0, 1)


def test_no_entry_guard_for_inputs_it_cannot_check() -> None:
    sparse = torch.randn(3, 3).to_sparse()
    assert EntryGuard.of([sparse], (), CallSignature.of([sparse]), (), entry=None) is None
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode() as mode:
        fake = mode.from_tensor(torch.randn(2))
    assert EntryGuard.of([fake], (), CallSignature.of([fake]), (), entry=None) is None


def test_unshared_matches_the_storage_groups() -> None:
    x = torch.randn(4)
    assert CallSignature.of([x, torch.randn(2)]).unshared
    assert not CallSignature.of([x, x]).unshared
    assert not CallSignature.of([x, x[1:]]).unshared
    assert CallSignature.of([x, 3]).unshared  # a non-tensor shares nothing
    assert not CallSignature.of([x, torch.randn(2, 2).to_sparse()]).unshared  # no storage to compare
    assert CallSignature.of([x, torch.randn(2, 2).to_sparse(), 3, x[2:]]).groups == (0, -1, -1, 0)
    assert CallSignature.of([x, x[1:], torch.randn(1)]).groups == (0, 0, 2)


@pytest.mark.parametrize("kind", ["conveyor.compile", "torch.compile"])
def test_stage_keys_see_aliasing_after_a_distinct_call(kind: str) -> None:
    def f(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        a.mul_(2.0)
        return a + b

    torch._dynamo.reset()
    compiled = conveyor.compile(f) if kind == "conveyor.compile" else torch.compile(f, backend="conveyor")
    for make in (lambda: (torch.ones(3), torch.ones(3)), lambda: (lambda t: (t, t))(torch.ones(3))):
        for _ in range(2):
            e_args, c_args = make(), make()
            torch.testing.assert_close(compiled(*c_args), f(*e_args))
            torch.testing.assert_close(c_args[0], e_args[0])


def test_behind_dynamo_leafness_is_checked_where_grad_is_required() -> None:
    def f(a: torch.Tensor) -> torch.Tensor:
        return a.mul_(2.0)

    torch._dynamo.reset()
    compiled = torch.compile(f, backend="conveyor")
    x = torch.ones(2, requires_grad=True) * 1  # a non-leaf: the in-place op is fine
    torch.testing.assert_close(compiled(x), f(torch.ones(2, requires_grad=True) * 1))
    with pytest.raises(RuntimeError, match="leaf Variable"):
        f(torch.ones(2, requires_grad=True))
    with pytest.raises(RuntimeError, match="leaf Variable"):
        compiled(torch.ones(2, requires_grad=True))
