"""Inductor's FX graph cache under the ``inductor`` backend (Note [Inductor's
FX graph cache]): a second compile of the same graph, in a fresh entry cache
or a second process, is served by it and gives the same results bit for bit;
another graph, size, stride or configuration is a miss; a graph whose
symbols Inductor's stored guards could not check is never served."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import conveyor
import pytest
import torch
from conveyor.testing import check
from conveyor_inductor import fx_cache, programs
from fx_cache_helpers import lookups, mlp, step
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.symbolic_shapes import ShapeEnv

pytestmark = pytest.mark.usefixtures("empty_fx_graph_cache")  # conftest


def compile(f: Any, **options: Any) -> Any:
    return conveyor.compile(f, backend="inductor", cache=False, **options)  # conveyor's own disk cache off


def test_a_fresh_compile_of_the_same_program_is_served_by_the_fx_graph_cache() -> None:
    model, x = mlp(), torch.randn(4, 16)
    first = step(compile(model), model, x)
    assert lookups() == {"hit": 0, "miss": 2, "bypass": 0}  # forward and backward, stored
    again = compile(model)  # a new entry cache: conveyor compiles again, Inductor's cache serves it
    second = step(again, model, x)
    assert lookups() == {"hit": 2, "miss": 0, "bypass": 0}
    assert all(torch.equal(a, b) for a, b in zip(first, second, strict=True))  # the same kernels
    check(mlp(), x, compile=lambda m: compile(m))  # and still eager's results


def test_behind_dynamo_too() -> None:
    model, x = mlp(), torch.randn(4, 16)
    with torch.no_grad():
        want = torch.compile(model, backend="conveyor", options={"backend": "inductor", "cache": False})(x)
        assert lookups()["miss"] == 1
        torch._dynamo.reset()
        got = torch.compile(model, backend="conveyor", options={"backend": "inductor", "cache": False})(x)
    assert lookups() == {"hit": 1, "miss": 0, "bypass": 0}
    assert torch.equal(got, want)


def test_the_same_key_whether_graph_modules_are_lazy_or_not() -> None:
    # dynamo makes lazy graph modules: a program dynamo compiled first and that is loaded from
    # conveyor's disk cache in the next process (no dynamo) was built again (Note [Inductor's FX graph cache])
    lazy = pytest.importorskip("torch.fx._lazy_graph_module")._use_lazy_graph_module
    model, x = mlp(), torch.randn(4, 16)
    with torch.no_grad():
        with lazy(True):
            want = compile(model)(x)
        assert lookups()["miss"] == 1
        with lazy(False):
            got = compile(model)(x)
    assert lookups() == {"hit": 1, "miss": 0, "bypass": 0}
    assert torch.equal(got, want)


def test_a_program_loaded_from_the_disk_cache_is_not_retraced_and_is_served(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Note [Storing Inductor programs]: the stored graph is the decomposed one; the loaded
    # program propagates fake values over it and hands Inductor the same module, so the same key
    from conveyor.testing.round_trip import check_round_trip
    from conveyor_inductor import lowering

    decomposed: list[str] = []
    original = lowering.decompose

    def counted(graph: torch.fx.GraphModule, where: fx_cache.Scope, config: dict) -> torch.fx.GraphModule:
        decomposed.append("once")
        return original(graph, where, config)

    monkeypatch.setattr(lowering, "decompose", counted)
    checked = check_round_trip(mlp(), torch.randn(4, 16), folder=tmp_path, backend="inductor")
    assert len(decomposed) == 2  # forward and backward, in the first compile only
    assert lookups() == {"hit": 2, "miss": 2, "bypass": 0}  # the loaded program: Inductor's cache
    assert [p.label for p in programs(checked.compiled)] == ["forward", "backward"]


def scaled(x: torch.Tensor) -> torch.Tensor:
    return (x * 2).softmax(-1)


def scaled_more(x: torch.Tensor) -> torch.Tensor:
    return (x * 3).softmax(-1)


@pytest.mark.slow  # about 20 s; its neighbours keep the cache's hit and miss in the default run
def test_another_graph_size_stride_or_configuration_is_a_miss() -> None:
    x = torch.randn(6, 8)
    with torch.no_grad():
        compile(scaled)(x)
        assert lookups() == {"hit": 0, "miss": 1, "bypass": 0}
        for f, arg, options in (
            (scaled_more, x, {}),  # another constant in the graph
            (scaled, torch.randn(6, 9), {}),  # another size
            (scaled, torch.randn(8, 6).t(), {}),  # another stride
            (scaled, x.double(), {}),  # another dtype
            (scaled, x, {"stages": {"inductor": {"config": {"cpp.simdlen": 0}}}}),  # another Inductor configuration
        ):
            check(f, arg, compile=lambda g, options=options: compile(g, **options))
            assert lookups() == {"hit": 0, "miss": 1, "bypass": 0}, (f.__name__, arg.shape, arg.stride(), options)
        check(scaled, x, compile=compile)  # the first again
        assert lookups() == {"hit": 1, "miss": 0, "bypass": 0}


def test_symbolic_graphs_whose_sizes_are_not_inputs_are_not_served() -> None:
    """conveyor.compile's symbolic graphs carry their symbols in tensor sizes
    only: Inductor's stored guards could not be checked, so the cache stays off."""

    def f(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return (x @ w).relu().sum(0) / x.shape[0]

    w = torch.randn(6, 5)
    with torch.no_grad():
        for _ in range(2):
            compiled = compile(f, dynamic=True)
            for n in (3, 7):
                check(f, torch.randn(n, 6), w, compile=lambda _, c=compiled: c)
            assert lookups() == {"hit": 0, "miss": 0, "bypass": 0}


def test_scope_decides_by_the_inputs_symbols() -> None:
    static = FakeTensorMode()
    with static:
        x = torch.empty(4, 3)
    where = fx_cache.scope([x, 2], static)
    assert where.cached and where.fake_mode is not static and where.fake_mode.shape_env is not None
    assert [tuple(t.shape) for t in where.inputs[:1]] == [(4, 3)] and where.inputs[1] == 2
    assert where.inputs[0].fake_mode is where.fake_mode

    symbolic = FakeTensorMode(shape_env=ShapeEnv())
    env = symbolic.shape_env
    n = env.create_symintnode(env.create_symbol(5, source=_source("n")), hint=5)
    with symbolic:
        y = torch.empty(n, 3)
    lifted = fx_cache.scope([y, n], symbolic)
    assert lifted.cached and lifted.fake_mode is symbolic and lifted.inputs == (y, n)
    hidden = fx_cache.scope([y], symbolic)
    assert not hidden.cached and "not inputs" in hidden.why and hidden.config == {"fx_graph_cache": False}


def _source(name: str) -> Any:
    from torch._dynamo.source import ConstantSource

    return ConstantSource(name)


@pytest.mark.slow
def test_a_second_process_is_served_by_the_fx_graph_cache(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import torch, conveyor
        from torch._dynamo.utils import counters
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 8))
        out = conveyor.compile(model, backend="inductor", cache=False)(torch.ones(4, 16))
        out.sum().backward()
        print(counters["inductor"]["fxgraph_cache_hit"], counters["inductor"]["fxgraph_cache_miss"], out.sum().item())
        """
    )
    env = dict(os.environ, TORCHINDUCTOR_CACHE_DIR=str(tmp_path / "inductor"), CONVEYOR_PROGRESS="0")
    env.pop("TORCHINDUCTOR_FX_GRAPH_CACHE", None)
    runs = [
        subprocess.run(
            [sys.executable, "-c", script], env=env, check=True, capture_output=True, text=True
        ).stdout.split()
        for _ in range(2)
    ]
    assert runs[0][:2] == ["0", "2"] and runs[1][:2] == ["2", "0"]
    assert runs[0][2] == runs[1][2]


def test_outputs_in_other_layouts_are_caught_and_a_stale_entry_compiled_afresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """Note [Layouts in the inductor backend]: without the mark, Inductor returns the
    convolution's output (saved for the backward) channels-last; the stage says so. The
    cache entry that compile wrote is then found by a compile with the mark, and compiled afresh."""
    from conveyor import StageError
    from conveyor_inductor import layouts

    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 4, stride=4), torch.nn.Flatten(2), torch.nn.GELU())
    x = torch.randn(2, 3, 16, 16)
    with monkeypatch.context() as patched:
        patched.setattr(layouts, "keep_output_strides", lambda gm: None)
        with pytest.raises(
            StageError, match=r"'inductor': Inductor returns the forward graph's outputs in other layouts"
        ):
            compile(model)(x)
    assert lookups()["miss"] == 1
    check(model, x, compile=compile, atol=1e-5, rtol=1e-4)
    assert lookups() == {"hit": 1, "miss": 1, "bypass": 0}  # the stale forward entry, then the backward
