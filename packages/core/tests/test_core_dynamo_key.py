"""A dynamo graph's disk cache key before capture (conveyor.runtime.dynamo_key,
Note [Keyed before capture]): what it holds, what it refuses, the pointer
from it to a stored program, and a second dynamo compile that does not capture."""

from __future__ import annotations

import logging
import operator
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import conveyor.dynamo
import pytest
import torch
import torch.fx
from conveyor.frontend.capture import trace_user
from conveyor.protocol.config import resolve
from conveyor.protocol.pipeline import Pipeline
from conveyor.protocol.stage import Request
from conveyor.runtime import disk_cache, dynamo_key
from torch._subclasses.fake_tensor import FakeTensorMode


def fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(a @ b).sum(dim=-1) + a[:, 0]


def other_fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.relu(a @ b).sum(dim=-1) + a[:, 0]


def dynamo_graph(f: Callable[..., Any], *inputs: torch.Tensor) -> torch.fx.GraphModule:
    """The graph dynamo hands a backend for ``f(*inputs)``."""
    got: list[torch.fx.GraphModule] = []

    def backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        got.append(gm)
        return gm

    torch._dynamo.reset()
    try:
        torch.compile(f, backend=backend)(*inputs)
    finally:
        torch._dynamo.reset()
    (gm,) = got
    return gm


def inputs(*shape: int, dtype: torch.dtype = torch.float32, requires_grad: bool = False) -> list[torch.Tensor]:
    torch.manual_seed(0)
    return [torch.randn(*shape, dtype=dtype, requires_grad=requires_grad) for _ in range(2)]


def fakes(real: list[torch.Tensor]) -> list[torch.Tensor]:
    mode = FakeTensorMode()
    return [mode.from_tensor(t, static_shapes=True) for t in real]


def pipeline(tmp_path: Path) -> Pipeline:
    return Pipeline(resolve({"cache": True, "cache_dir": str(tmp_path)}))


def key_of(tmp_path: Path, f: Callable[..., Any], real: list[torch.Tensor], grad: bool = True) -> str | None:
    key, why = dynamo_key.precapture_key(pipeline(tmp_path), dynamo_graph(f, *real), fakes(real), grad)
    assert key is not None, why
    return key


def test_the_key_is_stable_and_changes_with_what_capture_reads(tmp_path: Path) -> None:
    base = key_of(tmp_path, fn, inputs(4, 4))
    assert key_of(tmp_path, fn, inputs(4, 4)) == base, "two dynamo compiles of one function key differently"
    variants = {
        "graph": key_of(tmp_path, other_fn, inputs(4, 4)),
        "sizes": key_of(tmp_path, fn, inputs(4, 4)[:1] + inputs(4, 5)[1:]),
        "dtype": key_of(tmp_path, fn, inputs(4, 4, dtype=torch.float64)),
        "requires_grad": key_of(tmp_path, fn, inputs(4, 4, requires_grad=True)),
        "grad mode": key_of(tmp_path, fn, inputs(4, 4), grad=False),
    }
    precision = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("medium" if precision != "medium" else "high")
    try:
        variants["matmul precision"] = key_of(tmp_path, fn, inputs(4, 4))
    finally:
        torch.set_float32_matmul_precision(precision)
    with torch.backends.cudnn.flags(enabled=not torch.backends.cudnn.enabled):
        variants["cuDNN"] = key_of(tmp_path, fn, inputs(4, 4))
    math_sdp = torch.backends.cuda.math_sdp_enabled()
    torch.backends.cuda.enable_math_sdp(not math_sdp)
    try:
        variants["attention backends"] = key_of(tmp_path, fn, inputs(4, 4))
    finally:
        torch.backends.cuda.enable_math_sdp(math_sdp)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        variants["autocast"] = key_of(tmp_path, fn, inputs(4, 4))
    same = [name for name, key in variants.items() if key == base]
    assert not same, f"the key does not change with {same}"
    assert len(set(variants.values())) == len(variants)


def _graph_calling(target: Any) -> torch.fx.GraphModule:
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.output((graph.call_function(target, (x, x)),))
    return torch.fx.GraphModule(torch.nn.Module(), graph)


def _user_function(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return a + b


def _with_attribute() -> torch.fx.GraphModule:
    root = torch.nn.Module()
    root.register_buffer("w", torch.ones(3))
    graph = torch.fx.Graph()
    x = graph.placeholder("x")
    graph.output((graph.call_function(operator.add, (x, graph.get_attr("w"))),))
    return torch.fx.GraphModule(root, graph)


@pytest.mark.parametrize(
    ("gm", "why"),
    [
        (_with_attribute(), "get_attr"),
        (_graph_calling(_user_function), "no version fixes"),
        (_graph_calling(torch.add), None),
        (_graph_calling(operator.mul), None),
        (_graph_calling(torch.ops.aten.add.Tensor), None),
    ],
)
def test_graphs_capture_reads_more_of_are_not_keyed(tmp_path: Path, gm: torch.fx.GraphModule, why: str | None) -> None:
    key, reason = dynamo_key.precapture_key(pipeline(tmp_path), gm, fakes([torch.ones(3)]), True)
    if why is None:
        assert key is not None, reason
    else:
        assert key is None and why in reason


def test_a_subclass_input_is_not_keyed(tmp_path: Path) -> None:
    class Marked(torch.Tensor):
        pass

    x = torch.ones(3).as_subclass(Marked)
    key, reason = dynamo_key.precapture_key(pipeline(tmp_path), _graph_calling(torch.add), [x], True)
    assert key is None and "Marked" in reason


# -- the pointer ----------------------------------------------------------------
def _compile_through_the_cache(pipe: Pipeline, real: list[torch.Tensor], warn: bool = False) -> Any:
    mode = FakeTensorMode()
    faked = [mode.from_tensor(t, static_shapes=True) for t in real]
    traced = trace_user(lambda *xs: (fn(*xs),), faked, mode).graph
    if warn:
        warnings.warn("a capture that warns", UserWarning, stacklevel=1)
    request = Request(traced, tuple(faked), mode, torch.is_grad_enabled())
    return disk_cache.compile_cached(pipe, request, pipe.compile)


def test_a_pointer_is_written_after_a_compile_and_serves_the_next_process(tmp_path: Path) -> None:
    real = inputs(4, 4)
    pipe = pipeline(tmp_path)
    pre = dynamo_key.Precapture.of(pipe, dynamo_graph(fn, *real), fakes(real), True)
    assert pre.key is not None and pre.load() is None
    with pre.recording():
        first, _ = _compile_through_the_cache(pipe, real)
    assert dynamo_key.pointer_path(tmp_path, pre.key).is_file()
    found = pre.load()
    assert found is not None
    torch.testing.assert_close(found[0](list(real))[0], fn(*real))
    torch.testing.assert_close(found[0](list(real))[0], first(list(real))[0])


def test_no_pointer_after_a_warning_or_when_the_cache_is_off(tmp_path: Path) -> None:
    real = inputs(4, 4)
    pipe = pipeline(tmp_path)
    pre = dynamo_key.Precapture.of(pipe, dynamo_graph(fn, *real), fakes(real), True)
    assert pre.key is not None
    with pytest.warns(UserWarning, match="a capture that warns"), pre.recording():
        _compile_through_the_cache(pipe, real, warn=True)
    assert not dynamo_key.pointer_path(tmp_path, pre.key).exists(), "a capture that warned was skipped next time"
    off = Pipeline(resolve({"cache": False, "cache_dir": str(tmp_path)}))
    assert dynamo_key.Precapture.of(off, dynamo_graph(fn, *real), fakes(real), True).key is None


def test_a_garbled_pointer_is_discarded(tmp_path: Path) -> None:
    real = inputs(4, 4)
    pipe = pipeline(tmp_path)
    pre = dynamo_key.Precapture.of(pipe, dynamo_graph(fn, *real), fakes(real), True)
    with pre.recording():
        _compile_through_the_cache(pipe, real)
    assert pre.key is not None
    pointer = dynamo_key.pointer_path(tmp_path, pre.key)
    pointer.write_bytes(pointer.read_bytes()[:-3])
    assert pre.load() is None and not pointer.exists()


# -- behind torch.compile --------------------------------------------------------
@pytest.mark.skipif(
    not hasattr(conveyor.dynamo, "dynamo_key"), reason="conveyor.dynamo does not look dynamo graphs up before capture"
)
def test_a_second_dynamo_compile_loads_without_capture(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    options = {"cache": True, "cache_dir": str(tmp_path)}
    real = inputs(4, 4, requires_grad=True)

    def step() -> tuple[torch.Tensor, ...]:
        torch._dynamo.reset()
        a, b = (t.detach().requires_grad_() for t in real)
        out = torch.compile(fn, backend="conveyor", options=options)(a, b)
        out.sum().backward()
        return out, a.grad, b.grad

    first = step()
    with caplog.at_level(logging.INFO, logger="conveyor"):
        second = step()
    torch._dynamo.reset()
    assert "before capture" in caplog.text, caplog.text
    a, b = (t.detach().requires_grad_() for t in real)
    out = fn(a, b)
    out.sum().backward()
    for got in (first, second):
        torch.testing.assert_close(got, (out, a.grad, b.grad))
