
import conveyor
import pytest
import torch
from conveyor import CaptureError, Plugins, StageError
from conveyor.testing import check
from conveyor.testing.pytest_plugin import stage_plugin
from core_helpers import Passthrough, wrapper


@pytest.fixture
def counted():
    """A pipeline with a pass-through stage that counts compiles and calls."""
    stage = Passthrough()
    plugins = Plugins()
    plugins.register(stage_plugin(wrapper("counter", impl=stage)), name="counter")
    return stage, plugins


def test_pytree_inputs_and_outputs():
    def f(xs, scale, *, opts):
        return {"sum": xs[0] + xs[1] * scale, "pair": (xs[0].sin(), opts["tag"]), "none": None}

    x, y = torch.randn(3), torch.randn(3)
    out = conveyor.compile(f)([x, y], 2.0, opts={"tag": "t"})
    assert out["pair"][1] == "t" and out["none"] is None
    torch.testing.assert_close(out["sum"], x + y * 2.0)
    check(f, [x, y], 2.0, opts={"tag": "t"})


def test_module_parameters_and_buffers_are_lifted(counted):
    stage, plugins = counted
    m = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.BatchNorm1d(3).eval())
    c = conveyor.compile(m, plugins=plugins)
    c(torch.randn(2, 4))
    names = [n.name for n in stage.seen[0].graph.graph.nodes if n.op == "placeholder"]
    assert len(names) == 2 + 2 + 3 + 1  # linear params, bn params, bn buffers, the input
    check(torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.ReLU()), torch.randn(2, 4))


def test_module_sees_parameter_updates_without_recompiling(counted):
    stage, plugins = counted
    m = torch.nn.Linear(3, 3)
    c = conveyor.compile(m, plugins=plugins)
    x = torch.randn(2, 3)
    c(x)
    with torch.no_grad():
        m.weight.add_(1.0)
    torch.testing.assert_close(c(x), m(x))
    assert len(stage.seen) == 1


@pytest.mark.parametrize(
    "change",
    ["dtype", "size", "stride", "requires_grad", "grad_mode", "aliasing", "constant", "structure", "training"],
)
def test_cache_hit_and_miss_on_each_key_component(counted, change):
    stage, plugins = counted

    def f(a, b, k=1):
        return a + b * k

    m = torch.nn.Dropout(0.0)
    c = conveyor.compile(f, plugins=plugins)
    cm = conveyor.compile(m, plugins=plugins)
    a, b = torch.randn(4, 4), torch.randn(4, 4)
    c(a, b)
    c(a.clone(), b.clone())  # same key: a hit
    assert len(stage.seen) == 1
    call = {
        "dtype": lambda: c(a.double(), b.double()),
        "size": lambda: c(torch.randn(5, 4), torch.randn(5, 4)),
        "stride": lambda: c(a.t(), b),
        "requires_grad": lambda: c(a.requires_grad_(), b),
        "grad_mode": lambda: torch.no_grad()(c)(a, b),
        "aliasing": lambda: c(a, a[0]),
        "constant": lambda: c(a, b, k=2),
        "structure": lambda: c(a, b=b),
        "training": lambda: cm.eval()(a),
    }[change]
    if change == "training":
        cm(a)
        seen = len(stage.seen)
        m.eval()
        cm(a)
        assert len(stage.seen) == seen + 1
        return
    call()
    assert len(stage.seen) == 2


def test_changed_constant_is_never_a_wrong_artifact():
    f = conveyor.compile(lambda x, k: x * k)
    x = torch.ones(2)
    assert f(x, 2).tolist() == [2, 2]
    assert f(x, 3).tolist() == [3, 3]


def test_unhashable_constant_is_a_clear_error():
    class Opaque:  # no __dict__: not an object conveyor walks into (Note [Python objects in and out])
        __slots__ = ()
        __hash__ = None

    with pytest.raises(CaptureError, match="type Opaque is specialized by value and must be hashable"):
        conveyor.compile(lambda x, o: x + 1)(torch.ones(1), Opaque())


def test_data_dependent_control_flow_compiles_through_dynamo():
    """Core Note [Programs only dynamo can split]: one warning, then each
    branch as eager takes it."""

    def f(x):
        if x.sum() > 0:
            return x + 1
        return x - 1

    compiled = conveyor.compile(f)
    with pytest.warns(UserWarning, match="through dynamo.*local_scalar_dense"):
        torch.testing.assert_close(compiled(torch.ones(3)), f(torch.ones(3)))
    torch.testing.assert_close(compiled(-torch.ones(3)), f(-torch.ones(3)))
    assert compiled.last.backend == "dynamo (split)" and compiled.compiles == 1


def test_stage_failure_names_the_stage():
    class Broken:
        def lower(self, request, options):
            raise ValueError("no can do")

    plugins = Plugins()
    plugins.register(stage_plugin(wrapper("broken", impl=Broken())), name="broken")
    with pytest.raises(StageError, match="conveyor stage 'broken': ValueError: no can do"):
        conveyor.compile(lambda x: x + 1, plugins=plugins)(torch.ones(1))


def test_no_grad_region_keeps_eager_semantics():
    def f(x):
        with torch.no_grad():
            y = x * 2
        return y + x, y

    check(f, torch.randn(3, requires_grad=True))


def test_last_graphs_are_stamped_by_stage(counted):
    stage, plugins = counted
    c = conveyor.compile(lambda x: x.cos(), plugins=plugins)
    with pytest.raises(ValueError, match="not been called"):
        conveyor.last_graphs(c)
    c(torch.randn(2))
    assert [(g.stage, g.label) for g in conveyor.last_graphs(c)] == [
        ("capture", "forward"), ("counter", "forward"), ("eager", "forward")
    ]
    assert "aten.cos" in str(conveyor.last_graphs(c)[-1])


def test_log_switch_prints_graphs(monkeypatch, capsys):
    monkeypatch.setenv("CONVEYOR_LOG_GRAPHS", "1")
    conveyor.compile(lambda x: x.tan())(torch.randn(2))
    assert "# after capture (forward)" in capsys.readouterr().err


def test_new_style_wrapper_hook_sees_every_stage_run(counted):
    stage, plugins = counted
    seen = []

    class Timer:
        @conveyor.hookimpl(wrapper=True)
        def conveyor_run_stage(self, stage, request, options):
            result = yield
            seen.append((stage.name, request.label, type(result).__name__))
            return result

    plugins.register(Timer(), name="timer")
    conveyor.compile(lambda x: x.exp(), plugins=plugins)(torch.randn(2))
    assert [(n, lbl) for n, lbl, _ in seen] == [("counter", "forward"), ("eager", "forward")]
    assert seen[0][2] == "Lowering"


def test_compiled_module_answers_for_its_module():
    m = torch.nn.Linear(2, 2)
    c = conveyor.compile(m)
    assert list(c.parameters()) == list(m.parameters())
    c.eval()
    assert not m.training


def test_tracing_leaves_fake_inputs_as_the_caller_passed_them(counted):
    stage, plugins = counted

    def f(x, y, z):
        x.t_()
        y.unsqueeze_(0)
        z.set_(torch.zeros(5))
        return x + 1

    conveyor.compile(f, plugins=plugins)(torch.randn(2, 3), torch.randn(3), torch.randn(4))
    x, y, z = stage.seen[0].inputs
    assert (x.shape, x.stride(), y.shape, z.shape) == ((2, 3), (3, 1), (3,), (4,))


def test_no_grad_regions_survive_a_stage_that_retraces():
    class Retrace:
        def lower(self, request, options):
            graph = conveyor.retrace(
                lambda *a: conveyor.call_graph(request.graph, a), request.inputs, request.fake_mode
            )
            return conveyor.Lowering((request.replace(graph=graph),), lambda inner: inner)

    plugins = Plugins()
    plugins.register(stage_plugin(wrapper("retrace", impl=Retrace())), name="retrace")

    def f(w, x):
        with torch.no_grad():
            w.mul_(0.5)  # an in-place update under no_grad: no history, as in eager
            y = x * 2
        return y * x

    check(f, torch.randn(3), torch.randn(3, requires_grad=True), compile=lambda fn: conveyor.compile(fn, plugins=plugins))


def test_tensors_the_program_closes_over_are_read_at_call_time():
    w = torch.randn(3)
    compiled = conveyor.compile(lambda x: x * w)
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), x * w)
    w.add_(1)  # the same object, a new value
    torch.testing.assert_close(compiled(x), x * w)


def test_writes_into_a_closed_over_tensor_reach_it():
    counter = torch.zeros(())

    def f(x):
        counter.add_(1)
        return x * counter

    compiled = conveyor.compile(f)
    torch.testing.assert_close(compiled(torch.ones(2)), torch.ones(2))
    torch.testing.assert_close(compiled(torch.ones(2)), torch.full((2,), 2.0))
    assert counter.item() == 2


def test_gradients_reach_a_closed_over_tensor_that_requires_grad():
    class Plain(torch.nn.Module):  # a tensor attribute, neither parameter nor buffer
        def __init__(self):
            super().__init__()
            self.scale = torch.randn(3, requires_grad=True)

        def forward(self, x):
            return (x * self.scale).sin()

    m = Plain()
    x = torch.randn(3, requires_grad=True)
    conveyor.compile(m)(x).sum().backward()
    got = (m.scale.grad.clone(), x.grad.clone())
    m.scale.grad = x.grad = None
    m(x).sum().backward()
    torch.testing.assert_close(got, (m.scale.grad, x.grad))


def test_slice_arguments_are_specialized_by_value():
    compiled = conveyor.compile(lambda x, s: x[s] * 2)
    x = torch.randn(6)
    torch.testing.assert_close(compiled(x, slice(0, 2)), x[0:2] * 2)
    torch.testing.assert_close(compiled(x, slice(1, 5)), x[1:5] * 2)


def test_autocast_state_is_part_of_the_key():
    compiled = conveyor.compile(torch.nn.Linear(4, 2))
    x = torch.randn(3, 4)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert compiled(x).dtype == torch.bfloat16
    assert compiled(x).dtype == torch.float32


def test_a_program_that_reseeds_runs_eagerly_with_a_warning():
    def f(x):
        torch.manual_seed(3)
        return x + torch.randn(3)

    with pytest.warns(UserWarning, match="conveyor: running .*f eagerly: it calls torch.manual_seed"):
        compiled = conveyor.compile(f)
        torch.testing.assert_close(compiled(torch.zeros(3)), f(torch.zeros(3)))
    torch.testing.assert_close(compiled(torch.zeros(3)), f(torch.zeros(3)))  # reseeds on every call


def _sets_requires_grad(a):
    a.requires_grad_(True)
    return a * 2


def _detaches_in_place(x):
    y = x * 2
    y.detach_()
    return y


def _swaps_data(x, y):
    x.data = y
    return x + 1


@pytest.mark.parametrize(
    ("fn", "make_args"),
    [
        (_sets_requires_grad, lambda: (torch.randn(3),)),
        (_detaches_in_place, lambda: (torch.randn(3, requires_grad=True),)),
        (_swaps_data, lambda: (torch.randn(3), torch.randn(3))),
    ],
    ids=["requires_grad_", "detach_", "data_set"],
)
def test_programs_changing_autograd_state_run_eagerly_with_a_warning(fn, make_args):
    with pytest.warns(UserWarning, match=r"conveyor: running .* eagerly: it uses Tensor\."):
        check(fn, *make_args())


def test_a_capture_leaves_seeding_and_autograd_functions_of_other_threads_alone():
    # Note [Watching a capture, thread by thread]: while one thread captures,
    # another thread's torch.manual_seed and autograd.Function run as torch's own
    import threading

    class Double(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    started, done = threading.Event(), threading.Event()
    seen: list[object] = []

    def other_thread() -> None:
        started.wait(30)
        try:
            torch.manual_seed(7)
            x = torch.ones(2, requires_grad=True)
            Double.apply(x).sum().backward()
            seen.append(x.grad.tolist())
        except BaseException as exc:  # recorded, asserted below
            seen.append(exc)
        done.set()

    def program(x):
        started.set()
        done.wait(30)
        return x + 1

    worker = threading.Thread(target=other_thread)
    worker.start()
    compiled = conveyor.compile(program)
    torch.testing.assert_close(compiled(torch.zeros(2)), torch.ones(2))
    worker.join(30)
    assert seen == [[2.0, 2.0]]
    assert torch.initial_seed() == 7


def test_an_op_taking_a_storage_runs_eagerly_with_a_warning():
    """Note [Arguments a graph cannot hold] (cuDNN's RNNs flatten their weights this way on CUDA)."""

    def fn(x):
        y = torch.empty(0)
        y.set_(x.untyped_storage(), 0, (2,), (1,))
        return y * 2

    with pytest.warns(UserWarning, match="eagerly: an op in it takes an argument a graph cannot hold"):
        check(fn, torch.randn(4))
