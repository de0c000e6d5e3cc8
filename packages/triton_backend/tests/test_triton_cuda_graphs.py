"""Note [CUDA graphs] (``conveyor_triton.cuda_graphs``): the ``cuda_graphs``
option records a program's launches at its second call and replays them.

On CPU ``capture`` is replaced by a stand-in that does what a recording and a
replay do to memory: the recording runs the program over the graph's inputs
and keeps the outputs it made; a replay runs it again over the same inputs
and writes the results into those same outputs. Under
``CONVEYOR_TEST_DEVICE=cuda`` the tests record real CUDA graphs."""

from __future__ import annotations

import pickle
import warnings

import conveyor
import conveyor_triton
import pytest
import torch
from conveyor.protocol.artifacts import dumps, loads
from conveyor.testing import check
from conveyor_triton import cuda_graphs

ON_CUDA = torch.get_default_device().type == "cuda"


@pytest.fixture
def recordings(monkeypatch):
    """The replays made (a list of per-replay counters); on CPU through the stand-in."""
    made: list[list[int]] = []
    real = cuda_graphs.capture

    def stand_in(run):
        run()  # the warm-up run
        outs = run()

        def replay():
            for out, new in zip(outs, run(), strict=True):
                if isinstance(out, torch.Tensor):
                    out.copy_(new)

        return replay, outs

    def counted(run):
        replays: list[int] = []
        made.append(replays)
        replay, outs = (real if ON_CUDA else stand_in)(run)

        def counting():
            replays.append(1)
            replay()

        return counting, outs

    if not ON_CUDA:
        monkeypatch.setattr(cuda_graphs, "DEVICES", ("cuda", "cpu"))
    monkeypatch.setattr(cuda_graphs, "capture", counted)
    return made


@pytest.fixture
def graphed(fresh_plugins):
    fresh_plugins.register(conveyor_triton.plugin, name="triton")
    return lambda f, **o: conveyor.compile(
        f, plugins=fresh_plugins, backend="triton", stages={"triton": {"cuda_graphs": True, **o}}
    )


def mlp(x, w, b):
    h = torch.nn.functional.gelu(x @ w + b)
    return torch.softmax(h, -1) * 2, h.sum(-1)


def _graphed_program(compiled):
    (g,) = [s.artifact for s in conveyor.last_graphs(compiled) if isinstance(s.artifact, conveyor_triton.program.Program)]
    return g


def test_the_second_call_records_and_later_calls_replay(graphed, recordings):
    w, b = torch.randn(16, 32), torch.randn(32)
    f = graphed(mlp)
    outs = []
    for step in range(5):
        x = torch.randn(8, 16) * (step + 1)  # a new batch each call: copied into the graph's buffer
        got = f(x, w, b)
        torch.testing.assert_close(got, mlp(x, w, b), atol=1e-5, rtol=1e-5)
        outs.append((x, got))
    assert 1 <= len(recordings) <= 2  # again once if the allocator put call 2's batch where call 1's was
    assert sum(len(r) for r in recordings) == 4  # each call after the first replays (the recording's own call too)
    for x, got in outs:  # outputs are fresh: later replays did not overwrite them
        torch.testing.assert_close(got, mlp(x, w, b), atol=1e-5, rtol=1e-5)


def test_static_inputs_are_read_in_place(graphed, recordings):
    w, b = torch.randn(16, 32), torch.randn(32)
    x = torch.randn(8, 16)
    f = graphed(mlp)
    for _ in range(4):
        torch.testing.assert_close(f(x, w, b), mlp(x, w, b), atol=1e-5, rtol=1e-5)
        w.add_(0.5)  # an optimizer step: the graph reads the parameter where it is
        x.mul_(-1)
    assert len(recordings) == 1


def test_a_moved_static_input_records_again_then_is_copied(graphed, recordings):
    w, b, x = torch.randn(16, 32), torch.randn(32), torch.randn(8, 16)
    f = graphed(mlp)
    f(x, w, b)
    f(x, w, b)  # recorded with every input static
    for _ in range(3):
        w = torch.randn(16, 32)  # moves: recorded again with w copied, then replayed
        torch.testing.assert_close(f(x, w, b), mlp(x, w, b), atol=1e-5, rtol=1e-5)
    assert len(recordings) == 2


def test_expanded_inputs_are_copied_through_their_memory(graphed, recordings):
    # an expanded input's buffer has elements that share memory: copy_ into it would raise
    fn = lambda x, b: (x * b).sin()  # noqa: E731
    f = graphed(fn)
    for _ in range(4):
        x, b = torch.randn(8, 32), torch.randn(32).expand(8, 32)  # new memory each call: copied
        torch.testing.assert_close(f(x, b), fn(x, b), atol=1e-5, rtol=1e-5)
    b = torch.randn(8, 32)  # the same shape, not expanded: recorded again
    torch.testing.assert_close(f(x, b), fn(x, b), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(f(x, b * 2), fn(x, b * 2), atol=1e-5, rtol=1e-5)


def test_the_checker_agrees_through_replays(graphed, recordings):
    f = graphed(mlp)
    w, b = torch.randn(16, 32), torch.randn(32)
    for _ in range(3):
        check(mlp, torch.randn(8, 16), w, b, compile=lambda fn: f, atol=1e-5, rtol=1e-5)
    assert recordings


def test_outputs_that_alias_inputs_or_each_other_alias_them_after_replays(graphed, recordings):
    def fn(x, w):
        y = x.exp() + w
        return x[1:], y, y.t(), y[1:], w, x[:, 1:] * 2

    f = graphed(fn)
    w = torch.randn(5)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for _ in range(4):
            x = torch.randn(4, 5)
            result = check(fn, x, w, compile=lambda _: f)  # outputs, values and which share memory
            out = result.compiled_out  # the checker compared which outputs are or share inputs
            assert out[2].data_ptr() == out[1].data_ptr()
            assert out[3].untyped_storage().data_ptr() == out[1].untyped_storage().data_ptr()
    assert len(recordings) in (1, 2)
    x = torch.randn(5, 4).t()  # another layout of the input an output views: this call runs without the graph
    check(fn, x, w, compile=lambda _: f)


def test_what_cannot_be_recorded_runs_without_a_graph(graphed, recordings, monkeypatch):
    def failing(run):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(cuda_graphs, "capture", failing)
    f = graphed(mlp)
    w, b = torch.randn(16, 32), torch.randn(32)
    f(torch.randn(8, 16), w, b)
    with pytest.warns(RuntimeWarning, match="runs without a CUDA graph: RuntimeError: operation not permitted"):
        x = torch.randn(8, 16)
        torch.testing.assert_close(f(x, w, b), mlp(x, w, b), atol=1e-5, rtol=1e-5)


def test_not_recorded_where_it_cannot_apply(graphed, monkeypatch):
    if not ON_CUDA:  # CPU tensors run in the interpreter, which a GPU session has off
        monkeypatch.setattr(cuda_graphs, "DEVICES", ("cuda",))
        f = graphed(mlp)
        x = torch.randn(8, 16, device="cpu")
        f(x, torch.randn(16, 32, device="cpu"), torch.randn(32, device="cpu"))
        (report,) = conveyor_triton.reports(f)
        assert any("cuda_graphs: not recorded: not every tensor input is on CUDA" in n for n in report.notes), report.notes

    def writes(x):
        x.mul_(2)
        return x.sin()

    monkeypatch.setattr(cuda_graphs, "DEVICES", ("cuda", "cpu"))
    g = graphed(writes)
    check(writes, torch.randn(5), compile=lambda _: g)
    (report,) = conveyor_triton.reports(g)
    assert any("not recorded: its graph writes to tensors" in n for n in report.notes), report.notes


def test_training_steps_record_forward_and_backward(fresh_plugins, installed_plugins, recordings):
    model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(), torch.nn.Linear(32, 4))
    twin = pickle.loads(pickle.dumps(model))
    f = conveyor.compile(model, plugins=installed_plugins, backend="triton", stages={"triton": {"cuda_graphs": True}})
    opt, twin_opt = torch.optim.SGD(model.parameters(), lr=0.1), torch.optim.SGD(twin.parameters(), lr=0.1)
    for _ in range(4):
        x = torch.randn(8, 16)
        for o, run in ((opt, f), (twin_opt, twin)):
            o.zero_grad()
            run(x).square().mean().backward()
            o.step()
        for p, q in zip(model.parameters(), twin.parameters(), strict=True):
            torch.testing.assert_close(p, q, atol=1e-5, rtol=1e-5)
    assert len(recordings) >= 2  # the forward's and the backward's


def test_a_graphed_program_pickles_without_its_recording(graphed, recordings):
    w, b, x = torch.randn(16, 32), torch.randn(32), torch.randn(8, 16)
    f = graphed(mlp)
    f(x, w, b)
    f(x, w, b)
    (prog,) = [g for g in _compiled_fns(f) if isinstance(g, cuda_graphs.GraphedProgram)]
    assert prog.recorded
    again = loads(dumps(prog))  # Note [Picklable run-time callables]
    assert not again.recorded and again.label == prog.label


def _compiled_fns(compiled):
    """The backend's callables a compiled function holds (found by walking its entries)."""
    found, seen, todo = [], set(), [compiled]
    while todo:
        obj = todo.pop()
        if id(obj) in seen or isinstance(obj, (torch.Tensor, str, int, float, type)) or obj is None:
            continue
        seen.add(id(obj))
        if isinstance(obj, cuda_graphs.GraphedProgram):
            found.append(obj)
            continue
        if isinstance(obj, dict):
            todo.extend(obj.values())
        elif isinstance(obj, (list, tuple, set)):
            todo.extend(obj)
        elif hasattr(obj, "__dict__") and type(obj).__module__.startswith("conveyor"):
            todo.extend(vars(obj).values())
        elif callable(obj) and getattr(obj, "__closure__", None):
            todo.extend(c.cell_contents for c in obj.__closure__ or ())
    return found
