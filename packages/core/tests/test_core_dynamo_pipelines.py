"""Note [One pipeline per configuration behind dynamo] and Note [Calls with
nothing to swap] (``conveyor.frontend.closure``)."""

import sys

import conveyor
import conveyor.runtime.dynamo_pipelines as dynamo_pipelines
import pytest
import torch
from conveyor.frontend.closure import _no_real_tensor
from torch._subclasses.fake_tensor import FakeTensorMode


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def _built(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """The pipelines the dynamo backend builds from now on."""
    built: list[object] = []
    real = dynamo_pipelines.Pipeline

    def counting(config):  # type: ignore[no-untyped-def]
        built.append(config)
        return real(config)

    monkeypatch.setattr(dynamo_pipelines, "Pipeline", counting)
    monkeypatch.setattr(dynamo_pipelines, "_pipelines", [])
    return built


def test_graphs_of_one_configuration_share_a_pipeline(monkeypatch: pytest.MonkeyPatch) -> None:
    built = _built(monkeypatch)

    def f(x):
        y = x.sin()
        torch._dynamo.graph_break()
        return y.cos()

    torch.testing.assert_close(torch.compile(f, backend="conveyor")(torch.ones(3)), torch.ones(3).sin().cos())
    torch.testing.assert_close(torch.compile(lambda x: x + 1, backend="conveyor")(torch.ones(2)), torch.full((2,), 2.0))
    assert len(built) == 1  # three graphs, one configuration


def test_another_configuration_or_path_builds_anew(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    built = _built(monkeypatch)
    torch.compile(lambda x: x + 1, backend="conveyor")(torch.ones(2))
    torch._dynamo.reset()
    torch.compile(lambda x: x + 1, backend="conveyor", options={"progress": False})(torch.ones(2))
    assert len(built) == 2 and not built[1].progress
    torch._dynamo.reset()
    monkeypatch.setenv("CONVEYOR_CACHE_DIR", str(tmp_path))  # an environment layer is read on every call
    torch.compile(lambda x: x + 2, backend="conveyor")(torch.ones(2))
    assert len(built) == 3 and built[2].cache_dir == str(tmp_path)
    torch._dynamo.reset()
    monkeypatch.delenv("CONVEYOR_CACHE_DIR")
    monkeypatch.setattr(sys, "path", [str(tmp_path), *sys.path])  # entry points may differ
    torch.compile(lambda x: x + 3, backend="conveyor")(torch.ones(2))
    assert len(built) == 4


def test_a_configuration_that_fails_keeps_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    built = _built(monkeypatch)
    for _ in range(2):
        torch._dynamo.reset()
        bad = torch.compile(lambda x: x + 1, backend="conveyor", options={"backend": "no_such_backend"})
        with pytest.raises(Exception, match="no_such_backend"):
            bad(torch.ones(2))
    assert len(built) == 2 and dynamo_pipelines._pipelines == []


def test_calls_with_nothing_to_swap_are_told_apart() -> None:
    with FakeTensorMode() as mode:
        fake = mode.from_tensor(torch.ones(2))
    real = torch.ones(2)
    assert _no_real_tensor((fake, 1, 2.0, None, torch.Size([2]), torch.float32, [fake, fake], (1, 2)))
    assert not _no_real_tensor((real,))
    assert not _no_real_tensor((fake, [fake, real]))  # in a list: pytree's path swaps it
    assert not _no_real_tensor((torch.nn.Parameter(real),))
    assert not _no_real_tensor(({"a": fake},))  # anything else takes pytree's path
    assert not _no_real_tensor((slice(real, None),))


def test_a_closed_over_tensor_in_a_list_is_still_lifted() -> None:
    w = torch.randn(2)

    def f(x):
        return torch.cat([x, w]) * 2, torch.stack((x, w)).sum(0)

    x = torch.randn(2, requires_grad=True)
    compiled = conveyor.compile(f, cache=False)
    got, want = compiled(x), f(x)
    for g, e in zip(got, want, strict=True):
        torch.testing.assert_close(g, e)
    w.add_(1)  # the lifted tensor is read again at each call, not a constant of the graph
    for g, e in zip(compiled(x), f(x), strict=True):
        torch.testing.assert_close(g, e)
