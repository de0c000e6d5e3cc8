"""The catalogue through ``conveyor.testing.check`` with the eager backend.

Gradients are compared with respect to the leaves behind the inputs (the
checker's rule): after ``x.mul_(2)`` on a non-leaf ``x``, eager computes
later uses from the new ``x`` object, a functional graph from the functional
value; the gradients that reach the leaves are the same.
"""

from __future__ import annotations

import warnings

import conveyor
import conveyor_functionalize.plugin
import conveyor_functionalize.trace as trace
import pytest
import torch
from conveyor.testing import check
from conveyor.testing.pytest_plugin import stage_plugin
from functionalize_catalogue import CASES, Case


def functionalize_plugins(*extra: conveyor.StageSpec) -> conveyor.Plugins:
    """The core and this stage only: these tests do not depend on which other
    stages happen to be installed (tests/ at the top covers the full pipeline)."""
    plugins = conveyor.Plugins()
    plugins.register(conveyor_functionalize.plugin, name="functionalize")
    if extra:
        plugins.register(stage_plugin(*extra), name="extra")
    return plugins


def compile_eager(fn):
    return conveyor.compile(fn, plugins=functionalize_plugins(), backend="eager")


#: catalogue cases the stage gets wrong with grad, by name -> exact cause (strict xfails); none today
KNOWN_WRONG: dict[str, str] = {}


def catalogue_params() -> list[object]:
    params = []
    for c in CASES:
        for rg in (False, True) if c.grad_variant else (False,):
            marks = [pytest.mark.xfail(strict=True, reason=KNOWN_WRONG[c.name])] if rg and c.name in KNOWN_WRONG else []
            params.append(pytest.param(c, rg, id=f"{c.name}-{'grad' if rg else 'plain'}", marks=marks))
    return params


@pytest.mark.parametrize(("case", "requires_grad"), catalogue_params())
def test_catalogue(case: Case, requires_grad: bool) -> None:
    check(case.fn, *case.inputs(case.leaves(requires_grad)), compile=compile_eager)


class BufferUpdate(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)
        self.register_buffer("calls", torch.zeros(()))
        self.register_buffer("running", torch.zeros(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.calls.add_(1)
        with torch.no_grad():
            self.running.mul_(0.9).add_(x.mean(0), alpha=0.1)
        return self.lin(x) + self.running


MODULES = {
    "batchnorm_train": lambda: torch.nn.BatchNorm2d(3).train(),
    "batchnorm_eval": lambda: torch.nn.BatchNorm2d(3).eval(),
    "buffer_update": BufferUpdate,
}
MODULE_INPUTS = {"batchnorm_train": (2, 3, 4, 4), "batchnorm_eval": (2, 3, 4, 4), "buffer_update": (5, 4)}


@pytest.mark.parametrize("requires_grad", [False, True], ids=["plain", "grad"])
@pytest.mark.parametrize("name", sorted(MODULES))
def test_modules(name: str, requires_grad: bool) -> None:
    x = torch.randn(MODULE_INPUTS[name]).requires_grad_(requires_grad)
    check(MODULES[name](), x, compile=compile_eager)


def test_module_called_twice_keeps_updating_its_buffers() -> None:
    eager, compiled_module = BufferUpdate(), BufferUpdate()
    compiled_module.load_state_dict(eager.state_dict())
    compiled = compile_eager(compiled_module)
    for _ in range(3):
        x = torch.randn(5, 4)
        torch.testing.assert_close(compiled(x), eager(x))
    assert compiled_module.calls.item() == 3.0
    torch.testing.assert_close(compiled_module.running, eager.running)


class RecordingBackend:
    """The eager backend, remembering each graph it is handed."""

    def __init__(self) -> None:
        self.graphs: list[torch.fx.GraphModule] = []

    def compile(self, request, options):
        self.graphs.append(request.graph)
        graph = request.graph
        return lambda args: graph(*args)


#: catalogue cases that run eagerly, warned, so that no graph reaches the backend:
#: ``as_strided_`` of a tensor that requires grad (core Note [as_strided_ of a tensor
#: that requires grad])
RUN_EAGERLY = {("as_strided_", True)}


def test_no_writing_op_reaches_the_backend() -> None:
    backend = RecordingBackend()
    plugins = functionalize_plugins(conveyor.StageSpec(name="recording", kind="backend", impl=backend))
    compiled_cases = 0
    eager = set()
    for case in CASES:
        for requires_grad in (False, True) if case.grad_variant else (False,):
            fn = conveyor.compile(case.fn, plugins=plugins, backend="recording")
            with warnings.catch_warnings(record=True) as seen:
                warnings.simplefilter("always")
                try:
                    fn(*case.inputs(case.leaves(requires_grad)))
                except RuntimeError:  # what eager raises too (out= with grad); checked by test_catalogue
                    continue
            if any(str(w.message).startswith("conveyor: running") for w in seen):
                eager.add((case.name, requires_grad))
            else:
                compiled_cases += 1
    assert eager == RUN_EAGERLY
    for name, make in MODULES.items():
        conveyor.compile(make(), plugins=plugins, backend="recording")(torch.randn(MODULE_INPUTS[name]))
    assert len(backend.graphs) == compiled_cases + len(MODULES)
    for graph in backend.graphs:
        assert trace.writing_nodes(graph) == [], graph.code


def test_without_functionalize_the_backend_sees_mutations() -> None:
    case = next(c for c in CASES if c.name == "two_inputs")
    def compile_without(f):
        return conveyor.compile(f, plugins=functionalize_plugins(), backend="eager", disable=["functionalize"])

    check(case.fn, *case.inputs(case.leaves(False)), compile=compile_without)
    fn = compile_without(case.fn)
    fn(*case.inputs(case.leaves(False)))
    assert trace.writing_nodes(conveyor.last_graphs(fn)[-1].graph)


def test_views_are_replayed_with_eagers_view_ops() -> None:
    """Note [View replay]: the regenerated views carry eager's autograd nodes."""

    def f(x):
        y = x * 2
        return (x.t()[1:], x.diagonal(), *x.unbind(0), y[0], y[1])

    x = torch.randn(3, 3, requires_grad=True)
    eager = f(x)
    compiled = compile_eager(f)(x)
    assert [type(o.grad_fn).__name__ for o in compiled] == [type(o.grad_fn).__name__ for o in eager]


def update_leaf_under_no_grad(w, x):
    with torch.no_grad():
        w.add_(1)
    return (x * 2,)


def update_leaf_under_no_grad_then_read(w, x):
    with torch.no_grad():
        w.add_(1)
    return (x * 2 + w,)


def use_then_update_leaf_under_no_grad(w, x):
    y = w * x
    with torch.no_grad():
        w.mul_(0.5)
    return (y,)


class DecayInForward(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.lin(x)
        with torch.no_grad():
            self.lin.weight.mul_(0.9)
        return out


@pytest.mark.parametrize(
    "fn",
    [
        update_leaf_under_no_grad,
        update_leaf_under_no_grad_then_read,
        use_then_update_leaf_under_no_grad,
        DecayInForward(),
    ],
    ids=["update", "update_then_read", "use_then_update", "module_param_decay"],
)
def test_no_grad_writes_into_leaves_that_require_grad(fn) -> None:
    """Allowed in eager (no history is recorded); the leaf stays a leaf."""
    if isinstance(fn, torch.nn.Module):
        check(fn, torch.randn(2, 3), compile=compile_eager)
    else:
        check(fn, torch.randn(3, requires_grad=True), torch.randn(3), compile=compile_eager)


def add_one_and_double(x):
    x.add_(1)
    return (x, x * 2)


LAYOUTS_AND_DTYPES = {
    "transposed": lambda: torch.randn(4, 3).t(),
    "channels_last": lambda: torch.randn(2, 3, 4, 4).to(memory_format=torch.channels_last),
    "view_with_offset": lambda: torch.randn(4, 4)[1:, :2],
    "zero_dim": lambda: torch.tensor(1.5),
    "empty": lambda: torch.randn(0, 3),
    "int64": lambda: torch.arange(6),
    "float64": lambda: torch.randn(3, dtype=torch.float64),
}


@pytest.mark.parametrize("make", LAYOUTS_AND_DTYPES.values(), ids=LAYOUTS_AND_DTYPES.keys())
def test_mutated_inputs_of_any_layout_and_dtype(make) -> None:
    check(add_one_and_double, make(), compile=compile_eager)


def test_bool_inputs() -> None:
    def f(mask, x):
        mask.logical_not_()
        return (x.masked_fill(mask, 0.0), mask)

    check(f, torch.rand(4) > 0.5, torch.randn(4), compile=compile_eager)


def test_dynamic_shapes_under_torch_compile() -> None:
    """Views whose view ops take no symbolic argument are replayed on the real
    input whatever its size; only this stage and the eager backend run."""

    def f(x, y):
        x.add_(1)
        y.clamp_(min=0)  # decomposed in Python: needs the Python dispatcher under SymInts
        return (x.view(-1), x.t(), y[0], y * 2)

    torch._dynamo.reset()
    compiled = torch.compile(f, backend="conveyor", dynamic=True, options={"plugins": ["functionalize"], "backend": "eager"})
    for n in (3, 5):
        check(f, torch.randn(n, 4), torch.randn(n, 2), compile=lambda fn: compiled)
    assert [g.stage for g in conveyor.last_graphs(compiled)] == ["capture", "functionalize", "eager"]


def _views_in_symbols(x):
    return (
        x.view(x.shape[0], 2, 4),
        x.narrow(0, 1, x.shape[0] - 1),
        x.as_strided((x.shape[0] - 1,), (1,), 1),
        x.expand(2, x.shape[0], 8)[1, 1:],
    )


@pytest.mark.parametrize("entry", ["conveyor", "dynamo"])
@pytest.mark.parametrize("requires_grad", [False, True])
def test_dynamic_shapes_rebuild_views_whose_sizes_are_symbols(entry: str, requires_grad: bool) -> None:
    """Views of an input in symbols of its own sizes (Note [View replay]):
    rebuilt per call from expressions of the real input's sizes, no warning,
    one symbolic program for every size."""
    torch._dynamo.reset()
    options = {"plugins": ["functionalize", "autograd"], "backend": "eager"}
    if entry == "dynamo":
        compiled = torch.compile(_views_in_symbols, backend="conveyor", dynamic=True, options=options)
    else:
        compiled = conveyor.compile(_views_in_symbols, dynamic=True, backend="eager")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no static fallback
        for n in (3, 5, 8):
            check(_views_in_symbols, torch.randn(n, 8, requires_grad=requires_grad), compile=lambda fn: compiled)
    if entry == "conveyor":
        assert compiled.compiles == 1


def test_a_view_geometry_in_symbols_the_viewed_tensor_carries_in_a_multiple() -> None:
    """Mixtral's MoE block (behind dynamo, after its expert loop's graph
    break): an input of ``2*s`` rows reshaped to ``(2, s, 32)``. ``s`` is
    read back as ``v.size(0) // 2``."""
    from conveyor.runtime.dynamic_shapes import symbolic_fakes
    from conveyor_functionalize.views import SymbolicGeometry

    mode, (fake,) = symbolic_fakes([torch.randn(2, 5, 8)], frozenset({(0, 1)}))
    with mode:
        rows = (fake * 2).reshape(-1, 8)  # 2*s rows
        view = rows.reshape(2, -1, 8)
        odd = rows[1:].reshape(-1, 8)  # 2*s - 1 rows: s read back as (v.size(0) + 1) // 2
    found = SymbolicGeometry.of((tuple(view.size()), tuple(view.stride()), view.storage_offset()), rows)
    assert found is not None
    assert found(torch.randn(14, 8)) == ((2, 7, 8), (56, 8, 1), 0)
    found = SymbolicGeometry.of(((2, fake.size(1), 8), (fake.size(1) * 8, 8, 1), 0), odd)
    assert found is not None and found(torch.randn(13, 8)) == ((2, 7, 8), (56, 8, 1), 0)


def test_dynamic_shapes_refuse_a_view_in_another_inputs_symbols() -> None:
    def f(x, y):
        return (x.view(y.shape[0], -1),)

    torch._dynamo.reset()
    compiled = torch.compile(f, backend="conveyor", dynamic=True, options={"plugins": ["functionalize"], "backend": "eager"})
    # Note [Refusing symbolic sizes] (core): behind dynamo too, the refused graph compiles static, warned
    x, y = torch.randn(6, 4), torch.randn(3)
    with pytest.warns(UserWarning, match="static sizes.*functionalize.*output 0 has sizes or strides in symbols"):
        (out,) = compiled(x, y)
    torch.testing.assert_close(out, x.view(3, -1))
