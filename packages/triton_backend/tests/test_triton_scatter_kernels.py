"""Scatters as generated kernels (Note [Scatters] in ``conveyor_triton.scatters``):
``scatter_add``, ``index_add``, ``index_put(accumulate=True)``, ``scatter``
(a tensor, a scalar) and ``scatter_reduce(..., "sum")`` against eager,
bitwise where several values meet at one element (eager's CPU order), with
the interpreter's launches and a GPU's; an index out of range; what stays
aten; an sm_90 / sm_80 compile with the real Triton compiler."""

from __future__ import annotations

import conveyor_triton
import pytest
import torch
from conveyor.testing import check
from conveyor_triton import aot

#: bitwise in the interpreter (adds in eager's CPU order); on CUDA adds are atomics in
#: any order, as eager's own kernels there, so sums agree to rounding
EXACT = {"atol": 0, "rtol": 0} if torch.get_default_device().type == "cpu" else {"atol": 1e-5, "rtol": 1e-5}


LAUNCHES = [pytest.param({}, id="interpreter"), pytest.param({"launch_for": "cuda"}, id="gpu-launches")]


def _kinds(compiled) -> list[str]:
    return [k.kind for r in conveyor_triton.reports(compiled) for k in r.kernels]


def _fallbacks(compiled) -> list[str]:
    return [f"{f.target}: {f.reason}" for r in conveyor_triton.reports(compiled) for f in r.fallbacks]


def _spread(*shape: int, dtype=torch.float32) -> torch.Tensor:
    """Values over many magnitudes: a sum of several of them depends on its order."""
    x = torch.randn(*shape) * torch.logspace(-4, 4, shape[-1])
    return x.to(dtype) if dtype.is_floating_point else (x * 100).to(dtype)


def scatter_adds(x, i, s):
    return (
        x.scatter_add(1, i, s * 2) + 1,
        x.t().scatter_add(0, i.t(), s.t()),
        x.scatter_reduce(1, i, s, "sum"),
        x.scatter_reduce(1, i[:, :3], s, "sum", include_self=False),
    )


def index_adds(x, i, s, t):
    return x.index_add(0, i, s * 3, alpha=2), x.index_add(1, i[:3], t), x.index_put((i,), s[0], accumulate=True)


def index_puts(x, i, k, v):
    return torch.ops.aten.index_put(x, [None, i], v, True), x.index_put((k[:, None],), v[0, :, None, :], accumulate=True) * 3


def index_stores(x, i, v):
    return x.index_put((i,), v), torch.ops.aten.index_put(x, [None, i[:2]], v[:2].t()) * 2


def scatters(x, i, s):
    return x.scatter(1, i, s), x.scatter(1, i[:2], -2.5) + 1, x.t().scatter(0, i[:, :1].t(), s.t())


CASES = [
    pytest.param(
        scatter_adds, lambda: (_spread(4, 7), torch.randint(0, 7, (4, 12)), _spread(4, 12)), id="scatter_add"
    ),
    pytest.param(
        scatter_adds,
        lambda: (_spread(4, 7, dtype=torch.float64), torch.randint(0, 7, (4, 12)), _spread(5, 13, dtype=torch.float64)[:4, :12]),
        id="scatter_add-float64-strided-source",
    ),
    pytest.param(
        scatter_adds,
        lambda: (_spread(4, 7, dtype=torch.int32), torch.randint(0, 7, (4, 12)), _spread(4, 12, dtype=torch.int32)),
        id="scatter_add-int32",
    ),
    pytest.param(
        index_adds,
        lambda: (_spread(5, 6), torch.tensor([4, 0, 4, 1, 4, 4]), _spread(6, 6), _spread(5, 3)),
        id="index_add",
    ),
    pytest.param(
        index_adds,
        lambda: (_spread(5, 6, dtype=torch.int64), torch.tensor([4, 0, 4, 1, 4, 4], dtype=torch.int32), _spread(6, 6, dtype=torch.int64), _spread(5, 3, dtype=torch.int64)),
        id="index_add-int64-int32-index",
    ),
    pytest.param(
        index_puts,
        lambda: (_spread(3, 5, 4), torch.tensor([[-1, 0, 4], [4, 4, -5]]), torch.tensor([[-1, 0, 2], [2, 2, -3]]), _spread(2, 3, 4)),
        id="index_put-negative-broadcast",
    ),
    pytest.param(
        index_stores, lambda: (torch.randn(4, 4), torch.tensor([3, -4, 1]), torch.randn(3, 4)), id="index_put-store"
    ),
    pytest.param(
        index_stores,
        lambda: (torch.randn(4, 4).half(), torch.tensor([-1, 0, 1], dtype=torch.int32), torch.randn(3, 1).half()),
        id="index_put-store-float16-broadcast",
    ),
    pytest.param(
        scatters,
        lambda: (torch.randn(4, 6), torch.tensor([[0, 0, 5], [1, 1, 1], [2, 3, 2], [5, 5, 5]]), torch.randn(4, 3)),
        id="scatter-duplicates",
    ),
    pytest.param(
        scatters,
        lambda: (torch.randn(4, 6).to(torch.bfloat16), torch.tensor([[0, 0, 5], [1, 1, 1], [2, 3, 2], [5, 5, 5]]), torch.randn(4, 3).to(torch.bfloat16)),
        id="scatter-bfloat16",
    ),
    pytest.param(
        scatters,
        lambda: (torch.randn(6, 4).t().double(), torch.tensor([[0, 0, 5], [1, 1, 1], [2, 3, 2], [5, 5, 5]]), torch.randn(4, 3).double()),
        id="scatter-float64-transposed-destination",
    ),
]


@pytest.mark.parametrize("options", LAUNCHES)
@pytest.mark.parametrize("fn, make_args", CASES)
def test_scatters_match_eager_bitwise(triton_only, fn, make_args, options):
    torch.manual_seed(0)
    result = check(fn, *make_args(), compile=triton_only(**options), **EXACT)
    assert not isinstance(result.eager_out, Exception), result.eager_out
    assert "scatter" in _kinds(result.compiled), _kinds(result.compiled)
    assert not _fallbacks(result.compiled), _fallbacks(result.compiled)


@pytest.mark.parametrize(
    "fn, args",
    [
        (lambda x, i, v: x.index_put((i,), v, accumulate=True), (torch.randn(3, 5), torch.tensor([[0, 1]]), torch.randn(3, 5))),
        (lambda x, i, v: x.index_put((i,), v, accumulate=True), (torch.randn(3, 5), torch.tensor([0, 1]), torch.randn(3, 1, 5))),
    ],
)
def test_shapes_eager_refuses_raise(triton_only, fn, args):
    """Values index_put's kernel refuses to broadcast (its meta function does
    not check): eager's error, never a read past the source."""
    with pytest.raises(RuntimeError) as eager:
        fn(*args)
    with pytest.raises(RuntimeError) as compiled:
        triton_only()(fn)(*args)
    assert str(compiled.value) == str(eager.value)


def test_a_loaded_program_runs_its_scatter(tmp_path):
    from conveyor.testing.round_trip import check_round_trip

    checked = check_round_trip(scatter_adds, _spread(4, 7), torch.randint(0, 7, (4, 12)), _spread(4, 12), folder=tmp_path, backend="triton")
    assert "scatter" in _kinds(checked.compiled)


def test_other_layouts_at_run_time_get_their_kernel(triton_only):
    """The step generates a kernel for layouts the graph did not have (its
    strides are constants of the source)."""
    import conveyor_triton.plugin  # noqa: F401

    fn = triton_only()(lambda x, i, s: x.scatter_add(1, i, s))
    x, i, s = _spread(4, 7), torch.randint(0, 7, (4, 12)), _spread(4, 12)
    torch.testing.assert_close(fn(x, i, s), x.scatter_add(1, i, s), **EXACT)
    (step,) = [st for p in conveyor_triton.programs(fn) for st in p.steps if hasattr(st, "scatter")]
    s2, i2 = _spread(12, 4).t(), i.t().contiguous().t()
    step_out = {}
    env = {step.scatter.dest: x, step.scatter.index: i2, step.scatter.source: s2}
    step.run(env)
    step_out = env[step.node]
    torch.testing.assert_close(step_out, x.scatter_add(1, i2, s2), **EXACT)
    assert len(step._kernels) == 1


def _generic_sources(compiled) -> set[str]:
    return {k.source for p in conveyor_triton.programs(compiled) for st in p.steps if hasattr(st, "_generic") for k in st._generic.values()}


def test_a_symbolic_graph_shares_one_generic_scatter_kernel():
    """The per-size programs of a symbolically sized graph launch the generic
    kernel (sizes and strides as arguments), one source for every size."""
    import conveyor

    fns = [
        lambda x, i, s: x.index_add(0, i, s * 2).relu(),
        lambda x, i, s: x.scatter_add(0, i[:, None].expand(-1, 4), s),
        lambda x, i, s: torch.ops.aten.embedding_dense_backward(s, i, x.shape[0], 1, False),
    ]
    for fn in fns:
        compiled = conveyor.compile(fn, backend="triton", dynamic=True)
        for n in (3, 5, 9):
            x, i, s = _spread(n, 4), torch.randint(0, n, (n + 2,)), _spread(n + 2, 4)
            torch.testing.assert_close(compiled(x, i, s), fn(x, i, s), **EXACT)
        assert compiled.compiles == 1
        assert len(_generic_sources(compiled)) == 1


def test_inputs_requiring_grad_need_autograd_stage(triton_only):
    """A scatter kernel records no autograd history, as no generated kernel does."""
    compiled = triton_only()(lambda x, i, s: x.index_add(0, i, s))
    with pytest.raises(RuntimeError, match="enable the autograd stage"):
        compiled(torch.randn(3, 2, requires_grad=True), torch.tensor([0, 0]), torch.randn(2, 2))


def test_empty_index(triton_only):
    check(lambda x, i, s: x.scatter_add(1, i, s), torch.randn(3, 4), torch.zeros(3, 0, dtype=torch.long), torch.randn(3, 2), compile=triton_only())


@pytest.mark.parametrize(
    "fn, args, error",
    [
        (lambda x, i, s: x.scatter_add(1, i, s), (torch.randn(2, 3), torch.tensor([[0, 3]]), torch.randn(1, 2)), RuntimeError),
        (lambda x, i, s: x.scatter_add(1, i, s), (torch.randn(2, 3), torch.tensor([[0, -1]]), torch.randn(1, 2)), RuntimeError),
        # eager's index_add raises a RuntimeError where its decomposition's index_put raises an IndexError
        (lambda x, i, s: x.index_add(0, i, s), (torch.randn(2, 3), torch.tensor([2]), torch.randn(1, 3)), (IndexError, RuntimeError)),
        (lambda x, i, s: x.index_put((i,), s, accumulate=True), (torch.randn(2, 3), torch.tensor([-3]), torch.randn(1, 3)), IndexError),
    ],
)
def test_index_out_of_range_raises_eagers_error(triton_only, errors_raised_on_the_host, fn, args, error):
    with pytest.raises(error) as eager:
        fn(*args)
    with pytest.raises(error) as compiled:
        triton_only()(fn)(*args)
    assert str(compiled.value) == str(eager.value)


def test_equal_indexes_of_an_index_put_run_eagers_op(triton_only):
    """index_put without accumulate stores; on CPU, equal indexes (-1 is 3
    here) run eager's op instead, whose choice among them is its own."""
    fn = triton_only()(lambda x, i, v: x.index_put((i,), v))
    x, v = torch.randn(4, 2), torch.randn(3, 2)
    for i in (torch.tensor([3, 0, 1]), torch.tensor([3, 0, -1])):
        torch.testing.assert_close(fn(x, i, v), x.index_put((i,), v), **EXACT)
    assert "scatter" in _kinds(fn)


def test_what_stays_aten(triton_only):
    def fn(x, i, s, h):
        return (
            h.scatter_add(1, i, h[:, :3]),  # float16 atomic adds
            x.scatter_reduce(1, i, s, "amax"),
        )

    i = torch.tensor([[0, 0, 2], [1, 1, 1]])
    result = check(fn, torch.randn(2, 4), i, torch.randn(2, 3), torch.randn(2, 4).half(), compile=triton_only())
    reasons = _fallbacks(result.compiled)
    assert any("atomic add of torch.float16" in r for r in reasons), reasons
    assert any("scatter_reduce other than a sum" in r for r in reasons), reasons


def test_training_gathers_scatter_their_gradients(full_pipeline):
    """gather's and index_select's backwards are scatter_add and index_add."""

    def fn(x, w, i, j):
        return x.gather(1, i).sin().sum() + w.index_select(0, j).exp().sum()

    x, w = torch.randn(4, 6, requires_grad=True), torch.randn(5, 3, requires_grad=True)
    result = check(fn, x, w, torch.randint(0, 6, (4, 9)), torch.tensor([1, 1, 4, 0, 1]), compile=full_pipeline)
    assert _kinds(result.compiled).count("scatter") == 2, _kinds(result.compiled)


@pytest.mark.parametrize("padding_idx", [None, 3])
def test_embedding_backward_is_a_scatter(full_pipeline, padding_idx):
    """embedding_dense_backward (kept whole by the decomposition table) adds
    the gradient's rows into zeros, skipping padding_idx, in eager's order."""
    import torch.nn.functional as F

    def fn(w, i):
        return (F.embedding(i, w, padding_idx=padding_idx) * torch.arange(6.0)).sum()

    w = _spread(7, 6).requires_grad_()
    result = check(fn, w, torch.tensor([[3, 1, 3, 3], [0, 6, 3, 1]]), compile=full_pipeline, **EXACT)
    assert "scatter" in _kinds(result.compiled), _kinds(result.compiled)
    assert not [r for r in _fallbacks(result.compiled) if "embedding" in r], _fallbacks(result.compiled)


def test_embedding_backward_aten_call(triton_only):
    aten = torch.ops.aten

    def fn(g, i):
        return aten.embedding_dense_backward(g, i, 9, 2, False), aten.embedding_dense_backward(g * 2, i, 9, -1, True)

    i = torch.tensor([[2, 8, 2], [0, 2, 8]])
    result = check(fn, _spread(2, 3, 5), i, compile=triton_only(), **EXACT)
    assert _kinds(result.compiled).count("scatter") == 1
    assert any("scale_grad_by_freq" in r for r in _fallbacks(result.compiled)), _fallbacks(result.compiled)


def test_deterministic_mode_on_cpu_keeps_the_kernel(triton_only):
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        result = check(lambda x, i, s: x.index_add(0, i, s), _spread(3, 4), torch.tensor([2, 2, 0, 2]), _spread(4, 4), compile=triton_only(), **EXACT)
    finally:
        torch.use_deterministic_algorithms(before)
    assert "scatter" in _kinds(result.compiled)


# ---------------------------------------------------------------------------
# Compiled for sm_90 and sm_80 by the real Triton compiler (Note [Ahead-of-time check])

AOT_RUNS = [
    (scatter_adds, lambda: (torch.randn(4, 7), torch.randint(0, 7, (4, 12)), torch.randn(4, 12))),
    (index_puts, lambda: (torch.randn(3, 5, 4), torch.tensor([[-1, 0, 4], [4, 4, -5]]), torch.tensor([[-1, 0, 2], [2, 2, -3]]), torch.randn(2, 3, 4))),
    (scatters, lambda: (torch.randn(4, 6).half(), torch.randint(0, 6, (4, 3)), torch.randn(4, 3).half())),
]


def _symbolic_runs():
    import conveyor

    compiled = conveyor.compile(lambda x, i, s: x.index_add(0, i, s), backend="triton", dynamic=True)
    for n in (3, 5):
        compiled(torch.randn(n, 4), torch.randint(0, n, (7,)), torch.randn(7, 4))


@pytest.mark.once  # Note [Tests run once in CI] (conftest.py)
def test_scatter_kernels_compile_for_sm90_and_sm80():
    from test_triton_aot import _compile_all, _program, _record

    recorder = _record([*(_program(fn, make_args) for fn, make_args in AOT_RUNS), _symbolic_runs])
    results = _compile_all(recorder)
    names = {launch.name for launch in recorder.launches()}
    assert all(any(op in n for n in names) for op in ("scatter_add", "index_put", "scatter")), names
    assert not aot.errors(results), aot.errors(results)
    spilling = [r.name for r in results if r.stats is not None and r.stats.spills]
    assert not spilling, spilling


# ---------------------------------------------------------------------------
# op_db samples (the shared sweep's runner, Note [Scatters]'s ops only)

SCATTER_OPS = ("scatter_add", "scatter", "index_add", "index_put", "index_copy", "scatter_reduce.sum")


@pytest.mark.opinfo
@pytest.mark.parametrize("dtype", [torch.float32, torch.int64], ids=str)
@pytest.mark.parametrize("op", SCATTER_OPS)
def test_opinfo_samples_match_eager(op, dtype, triton_only):
    from triton_opinfo_sweep import run

    outcome = run(op, dtype, triton_only(), limit=8)
    assert not outcome.failures, outcome.failures
    assert outcome.lowered, f"no sample of {op} ran a kernel"
