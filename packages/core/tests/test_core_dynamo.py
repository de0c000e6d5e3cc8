import conveyor
import pytest
import torch
from conveyor.testing import check


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


def test_backend_is_registered_through_the_entry_point():
    assert "conveyor" in torch._dynamo.list_backends()


def test_module_compiles_and_matches_eager_with_grads():
    m = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.GELU(), torch.nn.Linear(8, 2))
    checked = check(m, torch.randn(3, 4), compile=lambda mod: torch.compile(mod, backend="conveyor"))
    graphs = conveyor.last_graphs(checked.compiled)  # the compiled copy's graphs (m itself never ran)
    assert graphs[0].stage == "capture" and graphs[-1].stage == "eager"


def test_options_pass_through_and_are_checked():
    f = torch.compile(lambda x: x + 1, backend="conveyor", options={"backend": "eager"})
    assert f(torch.ones(2)).tolist() == [2, 2]
    bad = torch.compile(lambda x: x + 1, backend="conveyor", options={"bakend": "eager"})
    with pytest.raises(Exception, match=r"unknown key\(s\) \['bakend'\]"):
        bad(torch.ones(2))


def test_data_dependent_branch_works_under_dynamo():
    def f(x):
        if x.sum() > 0:
            return x + 1
        return x - 1

    f_c = torch.compile(f, backend="conveyor")
    assert f_c(torch.ones(2)).tolist() == [2, 2]
    assert f_c(-torch.ones(2)).tolist() == [-2, -2]


def test_no_grad_region_under_dynamo():
    def f(x):
        with torch.no_grad():
            y = x * 2
        return y + x

    check(f, torch.randn(3, requires_grad=True), compile=lambda fn: torch.compile(fn, backend="conveyor"))


def test_dynamic_shapes_compile_once_and_stay_symbolic():
    def f(x, y):
        return (x * y).sum(0) + x.shape[0]

    f_c = torch.compile(f, backend="conveyor", dynamic=True)
    for n in (3, 5, 7):
        x, y = torch.randn(n, 4), torch.randn(n, 4)
        torch.testing.assert_close(f_c(x, y), f(x, y))
    code = conveyor.last_graphs(f_c)[0].graph.code
    assert ", 7)" not in code  # the size is an input, not a constant


def test_aliasing_pattern_not_seen_at_lowering_recompiles_statically():
    def f(a, b):
        a.mul_(2)
        return a + b

    f_c = torch.compile(f, backend="conveyor")
    base = torch.arange(8.0)
    check(f, torch.arange(4.0), torch.ones(4), compile=lambda fn: f_c)
    check(f, base[:4], base[4:], compile=lambda fn: f_c)  # disjoint views of one storage


def test_scalars_read_with_item_under_dynamic_shapes():
    # dynamic=True passes LayerNorm's eps as a 0-d tensor read with .item()
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.LayerNorm(16), torch.nn.GELU())
    for batch in (3, 7):
        check(m, torch.randn(batch, 8), compile=lambda mod: torch.compile(mod, backend="conveyor", dynamic=True))


def test_a_scalar_tensor_read_with_item_is_specialized_by_value():
    def f(x, t):
        return x * t.item()

    f_c = torch.compile(f, backend="conveyor", dynamic=True)
    x = torch.randn(4)
    torch.testing.assert_close(f_c(x, torch.tensor(2.0)), x * 2.0)
    torch.testing.assert_close(f_c(x, torch.tensor(3.0)), x * 3.0)


def test_run_time_calls_are_not_rekeyed_on_what_dynamo_guards():
    # DDPOptimizer lowers each piece with plain fakes; at run time the same
    # inputs are nn.Parameters (Note [What dynamo's guards decide])
    from conveyor.dynamo import conveyor_backend
    from torch._subclasses.fake_tensor import FakeTensorMode

    gm = torch.fx.symbolic_trace(lambda w, x: (x @ w).relu())
    fake_mode = FakeTensorMode()
    w = torch.nn.Parameter(torch.randn(4, 3))
    x = torch.randn(2, 4)
    with fake_mode:
        fakes = [torch.empty(4, 3, requires_grad=True), torch.empty(2, 4)]
    compiled = conveyor_backend(gm, fakes)
    out = compiled(w, x)[0]
    torch.testing.assert_close(out, (x @ w).relu())
    out.sum().backward()
    torch.testing.assert_close(w.grad, x.t() @ ((x @ w) > 0).float())
    assert len(compiled.entries) == 0  # served by the graph compiled at lowering


def test_a_non_leaf_input_is_not_served_by_the_lowered_graph():
    """Note [What dynamo's guards decide]: leafness is conveyor's to check
    (the lowered graph was compiled for leaves)."""
    from conveyor.dynamo import backend
    from conveyor.protocol.config import resolve
    from conveyor.protocol.pipeline import Pipeline

    made = []
    inner = backend(Pipeline(resolve({})))

    def keep(gm, example_inputs):
        made.append(inner(gm, example_inputs))
        return made[-1]

    f = torch.compile(lambda x, w: (x * w).sum(), backend=keep, dynamic=False)
    x = torch.randn(3)
    leaf = torch.randn(3, requires_grad=True)
    f(x, leaf).backward()
    (compiled,) = made
    assert len(compiled.entries) == 0  # served by the lowered graph
    base = torch.randn(3, requires_grad=True)
    non_leaf = base * 2
    f(x, non_leaf).backward()
    assert len(compiled.entries) == 1  # compiled again for a non-leaf
    torch.testing.assert_close(base.grad, 2 * x)
    f(x, leaf).backward()
    assert len(compiled.entries) == 1
    torch.testing.assert_close(leaf.grad, 2 * x)


def test_a_body_traced_under_vmap_keeps_its_batched_tensors() -> None:
    """``associative_scan`` (combine_mode="generic", transformers' Mamba on CPU)
    traces its combine function under vmap: the capture's closure finder must
    not take a BatchedTensor for a real tensor the program closes over (it
    made a fake of it, which escaped the vmap)."""
    from torch._higher_order_ops.associative_scan import associative_scan

    def combine(left, right):
        return left[0] * right[0], right[0] * left[1] + right[1]

    def scan(a, b):
        return associative_scan(combine, (a, b), dim=2, combine_mode="generic")[1]

    a, b = torch.rand(2, 3, 4, 2), torch.randn(2, 3, 4, 2)
    torch._dynamo.reset()
    got = torch.compile(scan, backend="conveyor")(a, b)
    torch._dynamo.reset()
    torch.testing.assert_close(got, torch.compile(scan, backend="aot_eager")(a, b))


def test_an_optimizer_step_whose_learning_rate_changes_updates_the_callers_parameters() -> None:
    """Dynamo makes a changing lr a tensor input read with ``.item()``; the
    graph conveyor specializes on its value writes the parameters dynamo's
    graph holds, not copies of them."""
    results = []
    for compiled in (False, True):
        torch._dynamo.reset()
        torch.manual_seed(0)
        lin = torch.nn.Linear(3, 2)
        opt = torch.optim.SGD(lin.parameters(), lr=0.1)
        step = torch.compile(opt.step, backend="conveyor") if compiled else opt.step
        for i in range(3):
            opt.zero_grad()
            lin(torch.ones(2, 3)).sum().backward()
            opt.param_groups[0]["lr"] = 0.1 * (i + 1)
            step()
        results.append([p.detach().clone() for p in lin.parameters()])
    for got, want in zip(results[1], results[0], strict=True):
        torch.testing.assert_close(got, want)


def test_a_transform_in_a_graph_that_runs_eagerly_leaves_no_state_behind():
    """Note [Transform state a stopped trace leaves]: the capture stopped inside
    ``torch.func.grad`` (its ``requires_grad_``) with functorch's grad interpreter
    pushed and saved-tensor hooks disabled: dynamo's guard on the transform stack
    failed on the frame that made it (test_cpu_repro.py)."""
    from torch._functorch.pyfunctorch import retrieve_all_functorch_interpreters

    def f(x):
        return torch.func.grad(lambda y: y.sin().sum())(x)

    torch._dynamo.reset()
    x = torch.randn(4)
    with pytest.warns(UserWarning, match="running a dynamo graph eagerly"):
        out = torch.compile(f, backend="conveyor")(x)
    torch.testing.assert_close(out, x.cos())
    assert not retrieve_all_functorch_interpreters()
    assert torch._C._autograd._saved_tensors_hooks_is_enabled()
    assert not torch._C._functorch.get_inplace_requires_grad_allowed()
