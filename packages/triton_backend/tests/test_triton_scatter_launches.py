"""How scatter kernels launch (Note [Scatters] in ``conveyor_triton.scatters``):
a static kernel's launches after its first on CUDA are bound (Note [Bound
launches] in ``conveyor_triton.bound_launch``), and a kernel that only stores
is tuned on a GPU while one that adds is not (Note [Tuned launches] in
``conveyor_triton.tuning``).

There is no GPU here: the kernels run in Triton's interpreter on launches
chosen for a GPU (``launch_for="cuda"``). Binding is switched on for CPU
tensors and ``bind`` replaced by a launcher that launches the kernel it was
bound to through its ``JITFunction`` with the launch and tensors it was given,
so a wrong binding gives wrong values; tuning runs with a timer the test
controls (as in test_triton_tuning.py)."""

from __future__ import annotations

import conveyor_triton
import pytest
import torch
from conveyor.testing import check
from conveyor_triton import kernel_cache, scatter_step, tuning
from conveyor_triton.launch import Launch

#: bitwise in the interpreter (adds in eager's CPU order); on CUDA adds are atomics in
#: any order, as eager's own kernels there, so sums agree to rounding
EXACT = {"atol": 0, "rtol": 0} if torch.get_default_device().type == "cpu" else {"atol": 1e-5, "rtol": 1e-5}


def _spread(*shape: int) -> torch.Tensor:
    return torch.randn(*shape) * torch.logspace(-4, 4, shape[-1])


def adds(x, i, s, k):
    # an add kernel, and scatter_reduce without self: a clearing (store) kernel, then the adds
    return x.scatter_add(1, i, s), x.scatter_reduce(1, i[:, :3], s, "sum", include_self=False)


def stores(x, i, s, k):
    # distinct indexes (a store's choice among equal ones is unspecified on CUDA, as
    # eager's); for index_put the kernel runs on CPU only with distinct indexes
    return x.scatter(1, i[:, :7], s), x.index_put((k,), s[:3, :7])


def _args():
    distinct = torch.stack([torch.randperm(7) for _ in range(4)])  # each row's first 7: stores
    return _spread(4, 7), torch.cat([distinct, torch.randint(0, 7, (4, 5))], 1), _spread(4, 12), torch.randperm(4)[:3]


def _steps(compiled) -> list[scatter_step.ScatterStep]:
    return [s for p in conveyor_triton.programs(compiled) for s in p.steps if isinstance(s, scatter_step.ScatterStep)]


@pytest.fixture
def bound_in_interpreter(monkeypatch):
    """Bind launches on CPU: each binding records its launch and, when called,
    launches the kernel it was bound to (the last one loaded before it) with
    that launch on the tensors it is given."""
    bindings: list[tuple[Launch, list[int]]] = []
    loaded: list = []
    real_load = kernel_cache.load

    def load(source, name, cache_dir=None):
        fn, path = real_load(source, name, cache_dir)
        loaded.append(fn)
        return fn, path

    def bind(compiled, launch, args):
        fn, calls = loaded[-1], []
        bindings.append((launch, calls))

        def launch_bound(tensors):
            calls.append(len(tensors))
            fn[(launch.grid,)](*tensors, **launch.meta)
            return True

        return launch_bound

    monkeypatch.setattr(scatter_step, "binds_launches", lambda device: True)
    monkeypatch.setattr(scatter_step, "bind", bind)
    monkeypatch.setattr(kernel_cache, "load", load)
    return bindings


@pytest.mark.parametrize("fn", [adds, stores], ids=["adds", "stores"])
def test_later_launches_go_through_the_binding(triton_only, bound_in_interpreter, fn):
    compiled = triton_only(launch_for="cuda")(fn)
    args = _args()
    check(fn, *args, compile=lambda f: compiled, **EXACT)  # first call: JITFunction launches, then bound
    kernels = {k.source for step in _steps(compiled) for k in [step.kernel]}
    expected = len(kernels) + (1 if fn is adds else 0)  # scatter_reduce's clearing kernel has its own binding
    assert len(bound_in_interpreter) == expected
    assert all(calls == [] for _, calls in bound_in_interpreter)
    for _ in range(2):
        new = _args()
        for got, want in zip(compiled(*new), fn(*new)):
            torch.testing.assert_close(got, want, **EXACT)
    assert len(bound_in_interpreter) == expected  # bound once per kernel
    assert all(len(calls) == 2 for _, calls in bound_in_interpreter)


def test_a_generic_scatter_kernel_is_not_bound(bound_in_interpreter):
    import conveyor

    compiled = conveyor.compile(lambda x, i, s: x.index_add(0, i, s), backend="triton", dynamic=True)
    for n in (3, 5):
        x, i, s = _spread(n, 4), torch.randint(0, n, (7,)), _spread(7, 4)
        torch.testing.assert_close(compiled(x, i, s), x.index_add(0, i, s), **EXACT)
    assert not bound_in_interpreter


def _fastest(position: int):
    """A timer making the candidate at ``position`` the fastest."""
    seen: list[Launch] = []

    def timer(launch: Launch, run) -> float:
        run()
        seen.append(launch)
        return 0.0 if len(seen) - 1 == position else 1.0 + len(seen)

    timer.reset = seen.clear  # type: ignore[attr-defined]
    return timer


@pytest.mark.parametrize("position", range(2))
def test_store_scatters_are_tuned_and_adds_are_not(triton_only, monkeypatch, tmp_path, bound_in_interpreter, position):
    monkeypatch.setattr(tuning, "MIN_ELEMENTS", 0)  # the interpreter runs small programs only
    timer = _fastest(position)
    real_tune, chosen = tuning.tune, []

    def tune(run, options, device, kernel_file):
        timer.reset()
        best = real_tune(run, options, device, kernel_file)
        assert best == options[position]
        chosen.append(best)
        return best

    monkeypatch.setattr(tuning, "tune", tune)
    with tuning.tuning_on_cpu(timer):
        compiled = triton_only(launch_for="cuda", cache_dir=str(tmp_path))(lambda x, i, s, k: (*stores(x, i, s, k), *adds(x, i, s, k)))
        for _ in range(2):  # the second call: the bound launches, with the kept launch
            args = _args()
            for got, want in zip(compiled(*args), (*stores(*args), *adds(*args))):
                torch.testing.assert_close(got, want, **EXACT)
    steps = _steps(compiled)
    tuned = {source: launch for step in steps for source, launch in step._tuned.items()}
    store_sources = {s for s in tuned if "tl.store" in s}
    assert len(store_sources) == 3  # scatter, index_put, scatter_reduce's clearing kernel
    assert len(chosen) == 3 and {tuned[s] for s in store_sources} == set(chosen)
    assert all(tuned[s] == step.kernel.launch for step in steps for s in step._tuned if "tl.atomic" in s)
    assert {launch for launch, _ in bound_in_interpreter} == set(tuned.values())
    assert len(list(tmp_path.rglob("*.tune.json"))) == len(chosen)


def test_nothing_is_tuned_with_the_option_off(triton_only, monkeypatch):
    monkeypatch.setattr(tuning, "MIN_ELEMENTS", 0)

    def untimed(launch, run):
        raise AssertionError("tuned with autotune off")

    with tuning.tuning_on_cpu(untimed):
        check(stores, *_args(), compile=triton_only(launch_for="cuda", autotune=False), **EXACT)
