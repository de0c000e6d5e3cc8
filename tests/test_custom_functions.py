"""Custom autograd Functions and custom ops in compiled programs (issue 20),
both entry points and both backends, against eager: values and gradients,
with backwards that are deliberately not the derivative of the forward, so
only the program's own backward gives eager's gradients.

- ``torch.library.custom_op`` with ``register_autograd``/``register_fake``
  compiles as one node everywhere (core Note [Custom ops]).
- A ``torch.autograd.Function`` compiles as one node on both entry points
  (core Note [Custom autograd functions]): ``conveyor::apply_function_recorded``
  under ``conveyor.compile``, whose backward runs at run time (core Note [A
  Function's backward at run time]; ``test_function_backward_at_run_time``);
  behind dynamo ``conveyor::apply_function``, from the forward and backward
  bodies dynamo traced (core Note [Functions behind dynamo]), also with
  dynamic shapes.
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any

import conveyor
import pytest
import torch
from conveyor.dynamo import conveyor_backend, last_dynamo_graphs
from conveyor.testing import check

sys.path.insert(0, str(Path(__file__).parent))
from zoo_harness import (  # noqa: E402
    ALL_ENTRY_POINTS,
    entry_id,
    fresh_dynamo,  # noqa: E402,F401  (autouse)
)


@torch.library.custom_op("conveyor_tests::scaled_gelu", mutates_args=())
def scaled_gelu(x: torch.Tensor, scale: float) -> torch.Tensor:
    return x * torch.sigmoid(1.702 * x) * scale


@scaled_gelu.register_fake
def _(x: torch.Tensor, scale: float) -> torch.Tensor:
    return torch.empty_like(x)


def _setup(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
    ctx.save_for_backward(inputs[0])
    ctx.scale = inputs[1]


def _backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
    (x,) = ctx.saved_tensors
    return grad * x.sign() * ctx.scale, None  # not the derivative


scaled_gelu.register_autograd(_backward, setup_context=_setup)


class StraightThrough(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, w: torch.Tensor, k: float) -> torch.Tensor:
        ctx.save_for_backward(w)
        ctx.k = k
        return (x * w).round()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, None]:
        (w,) = ctx.saved_tensors
        return grad * w * ctx.k, grad.sum(0), None


class TwoOutputs(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        return x.exp(), x.cos()

    @staticmethod
    def backward(ctx: Any, ga: torch.Tensor, gb: torch.Tensor) -> torch.Tensor:
        return ga * 2 + gb


def _with_custom_op(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return scaled_gelu(x @ w, 0.5).sum(0)


def _with_function(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    a, b = TwoOutputs.apply(x.sin())
    return StraightThrough.apply(a + b, w[0], 3.0).sum(1)


def _inputs() -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(4, 3, requires_grad=True), torch.randn(3, 3, requires_grad=True)


@pytest.mark.parametrize("compile", ALL_ENTRY_POINTS, ids=entry_id)
def test_a_custom_op_with_its_autograd_compiles(compile: Any) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        check(_with_custom_op, *_inputs(), compile=compile)


def _custom_op_result_written(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    s = scaled_gelu(x @ w, 0.5)
    s.mul_(2)  # a write into the custom op's result: the program reaches the functionalize stage
    return s


def _custom_op_written_into_input(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    x.add_(scaled_gelu(w, 0.5).sum(0))
    return x


@pytest.mark.parametrize("fn", [_custom_op_result_written, _custom_op_written_into_input])
@pytest.mark.parametrize("compile", ALL_ENTRY_POINTS, ids=entry_id)
def test_a_custom_op_keeps_its_gradient_through_a_write(compile: Any, fn: Any) -> None:
    # the functional trace replays the custom op (whose autograd runs it under
    # no_grad) with grad recorded, as capture does: it was cut by a detach
    x, w = _inputs()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no eager fallback
        warnings.filterwarnings("ignore", "The .grad attribute of a Tensor that is not a leaf")  # torch's, on x * 1
        check(fn, x * 1, w, compile=compile)


def _addcmul_with_value(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x.t().addcmul_(y, y, value=0.5)  # dynamo writes it as prims.fma, an op with its own autograd, and copy_
    return x


def _fma_differentiable() -> bool:
    """Whether this torch's ``prims.fma`` (dynamo's spelling of
    ``addcmul_(.., value=)``) has an autograd formula (torch 2.12's has none:
    behind dynamo such a program's backward raises, as under aot_eager)."""
    import torch._inductor.inductor_prims  # noqa: F401  (registers prims.fma, as dynamo's rewrite does)

    a = torch.ones(2, requires_grad=True)
    try:
        torch.ops.prims.fma(a, a, a).sum().backward()
    except RuntimeError:
        return False
    return True


@pytest.mark.parametrize("compile", ALL_ENTRY_POINTS, ids=entry_id)
def test_a_write_dynamo_spells_with_an_op_of_its_own_keeps_its_gradient(compile: Any) -> None:
    if not _fma_differentiable():
        pytest.skip("this torch's prims.fma has no autograd formula")
    x, y = torch.randn(3, 4, requires_grad=True), torch.randn(4, 3, requires_grad=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        warnings.filterwarnings("ignore", "The .grad attribute of a Tensor that is not a leaf")
        check(_addcmul_with_value, x * 1, y, compile=compile)


@torch.library.custom_op("conveyor_tests::add_one_", mutates_args=("x",))
def add_one_(x: torch.Tensor) -> None:
    x.add_(1)


@add_one_.register_fake
def _(x: torch.Tensor) -> None:
    return None


def _mutating_custom_op_under_no_grad(x: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        add_one_(x)  # functionalized as the higher-order op auto_functionalized, recorded under no_grad
    return x * 1


@pytest.mark.parametrize("compile", ALL_ENTRY_POINTS, ids=entry_id)
def test_a_mutating_custom_op_under_no_grad_on_an_input_that_requires_grad(compile: Any) -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        warnings.filterwarnings("ignore", "The .grad attribute of a Tensor that is not a leaf")
        check(_mutating_custom_op_under_no_grad, torch.randn(3, requires_grad=True) * 1, compile=compile)


def _check_as_nodes(fn: Any, *args: Any, compile: Any, nodes: int, **kwargs: Any) -> Any:
    """``check`` with no eager fallback, and ``nodes`` apply_function nodes
    in the captured graph; the compiled callable."""
    compiled = compile(fn)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        check(fn, *args, compile=lambda _: compiled, **kwargs)
    assert _applied(compiled) == nodes, conveyor.last_graphs(compiled)[0].graph.code
    return compiled


def _applied(compiled: Any) -> int:
    return str(conveyor.last_graphs(compiled)[0].graph.code).count("conveyor.apply_function")


@pytest.mark.parametrize("compile", ALL_ENTRY_POINTS, ids=entry_id)
def test_custom_autograd_functions_keep_their_backward(compile: Any) -> None:
    _check_as_nodes(_with_function, *_inputs(), compile=compile, nodes=2)


def test_a_custom_function_compiles_in_inference_too() -> None:
    compiled = conveyor.compile(_with_function)
    x, w = (t.detach() for t in _inputs())
    torch.testing.assert_close(compiled(x, w), _with_function(x, w))


def test_a_program_with_a_custom_function_is_not_stored_on_disk(tmp_path: Path) -> None:
    compiled = conveyor.compile(_with_function, cache=True, cache_dir=str(tmp_path))
    check(_with_function, *_inputs(), compile=lambda fn: compiled)
    assert not list(tmp_path.rglob("*.program"))


class ScaledGrad(torch.autograd.Function):
    """Identity forward, scaled (and flagged) backward: non-tensor arguments."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, scale: float, flip: bool, name: str) -> torch.Tensor:
        ctx.scale, ctx.flip = scale, flip
        return x * 1.0 if name == "copy" else x.clone()

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        return (-grad if ctx.flip else grad) * ctx.scale, None, None, None


def _with_arguments(x: torch.Tensor) -> torch.Tensor:
    return ScaledGrad.apply(x.sin(), 0.25, True, "copy").exp()


@pytest.mark.parametrize("compile", ALL_ENTRY_POINTS, ids=entry_id)
def test_a_function_with_non_tensor_arguments(compile: Any) -> None:
    _check_as_nodes(_with_arguments, torch.randn(5, requires_grad=True), compile=compile, nodes=1)


class ArgmaxAndScaled(torch.autograd.Function):
    """Three outputs: an index (integral), a differentiable one and one it marks non-differentiable."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        e, rounded, idx = x.exp(), x.round(), x.argmax(-1)
        ctx.mark_non_differentiable(rounded, idx)
        ctx.save_for_backward(e)
        return idx, e, rounded

    @staticmethod
    def backward(ctx: Any, g_idx: torch.Tensor, g_e: torch.Tensor, g_rounded: torch.Tensor) -> torch.Tensor:
        (e,) = ctx.saved_tensors
        return g_e * e * 2 + g_rounded  # g_rounded: zeros, as autograd materializes it


def _with_non_differentiable(x: torch.Tensor) -> tuple[torch.Tensor, ...]:
    idx, e, rounded = ArgmaxAndScaled.apply(x * 3)
    return idx, e.sum(-1), rounded  # rounded does not require grad, in eager and compiled


@pytest.mark.parametrize("compile", ALL_ENTRY_POINTS, ids=entry_id)
def test_a_function_marking_outputs_non_differentiable(compile: Any) -> None:
    _check_as_nodes(_with_non_differentiable, torch.randn(4, 3, requires_grad=True), compile=compile, nodes=1)


class _Quantized(torch.nn.Module):
    """A linear layer whose weights pass a straight-through rounding."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = torch.nn.Linear(6, 4)
        self.w = torch.nn.Parameter(torch.randn(4))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return StraightThrough.apply(self.lin(x).tanh(), self.w, 2.0).sum(-1)


@pytest.mark.parametrize("compile", ALL_ENTRY_POINTS, ids=entry_id)
def test_a_module_applying_a_function_trains_as_in_eager(compile: Any) -> None:
    eager, model = _Quantized(), _Quantized()
    model.load_state_dict(eager.state_dict())
    compiled = compile(model)
    opts = [torch.optim.SGD(m.parameters(), lr=0.1) for m in (eager, model)]
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        for step in range(3):
            x = torch.randn(5, 6)
            losses = [(f(x) ** 2).sum() for f in (eager, compiled)]
            for loss, opt in zip(losses, opts, strict=True):
                opt.zero_grad()
                loss.backward()
            torch.testing.assert_close(losses[1], losses[0])
            for (name, a), b in zip(eager.named_parameters(), model.parameters(), strict=True):
                torch.testing.assert_close(b.grad, a.grad, msg=lambda m, n=name, s=step: f"step {s}: {n}.grad: {m}")
            for opt in opts:
                opt.step()
    assert _applied(compiled) == 1


def test_bloom_gelu_keeps_its_backward() -> None:
    bloom = pytest.importorskip("transformers.models.bloom.modeling_bloom")
    gelu = getattr(bloom, "GeLUFunction", None)
    if gelu is None:
        pytest.skip("this transformers has no bloom GeLUFunction")

    def mlp(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        return gelu.apply(x @ w) @ w.t()

    x, w = torch.randn(3, 8, requires_grad=True), torch.randn(8, 8, requires_grad=True)
    for compile in ALL_ENTRY_POINTS:
        torch._dynamo.reset()
        _check_as_nodes(mlp, x, w, compile=compile, nodes=1)


class ScaledBySize(torch.autograd.Function):
    """Given a size: under dynamic shapes a symbolic int, an argument of the node."""

    @staticmethod
    def forward(ctx: Any, x: torch.Tensor, n: int) -> torch.Tensor:
        ctx.n = n
        return x * n

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple[torch.Tensor, None]:
        return grad * (ctx.n + 1), None


@pytest.mark.parametrize("backend", ["eager", "triton"])
def test_functions_behind_dynamo_with_dynamic_shapes(backend: str) -> None:
    def fn(x: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, ...]:
        idx, e, rounded = ArgmaxAndScaled.apply(ScaledBySize.apply(x, x.shape[0]))
        return StraightThrough.apply(e + rounded, w, 3.0).sum(1), idx

    compiled = torch.compile(fn, backend="conveyor", dynamic=True, options={"backend": backend})
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        for rows, cols in ((4, 3), (6, 5), (2, 7)):
            x, w = torch.randn(rows, cols, requires_grad=True), torch.randn(cols, requires_grad=True)
            check(fn, x, w, compile=lambda _: compiled)
            assert _applied(compiled) == 3
    graph = conveyor.last_graphs(compiled)[0].graph
    shapes = [n.meta["val"].shape for n in graph.graph.nodes if n.op == "placeholder" and isinstance(n.meta.get("val"), torch.Tensor)]
    assert any(isinstance(d, torch.SymInt) for s in shapes for d in s), shapes  # one graph for every size


def test_a_function_behind_dynamo_run_without_grad_traces_its_forward() -> None:
    """dynamo applies the Function with its bodies (inputs that require grad);
    a call under ``no_grad`` compiles again, where the forward body is traced
    inline (Note [Functions behind dynamo])."""
    graphs: list[torch.fx.GraphModule] = []

    def keep(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        graphs.append(gm)
        return gm

    torch.compile(_with_function, backend=keep)(*_inputs())
    compiled = conveyor_backend(graphs[0], _inputs())
    x, w = _inputs()
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        with torch.no_grad():
            out = compiled(x, w)
        assert _dynamo_applied() == 0 and "round" in str(last_dynamo_graphs()[0].graph.code)
        torch.testing.assert_close(out, (_with_function(x, w),))
        assert not out[0].requires_grad
        compiled(x, w)
        assert _dynamo_applied() == 2


def _dynamo_applied() -> int:
    return str(last_dynamo_graphs()[0].graph.code).count("conveyor.apply_function")


class _Doubling(torch.autograd.Function):
    @staticmethod
    def forward(ctx: Any, x: torch.Tensor) -> torch.Tensor:
        ctx.mark_dirty(x)
        x.mul_(2)
        return x  # dynamo breaks the graph where the result of mul_ is returned

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad * 2


def test_a_function_writing_its_input_behind_dynamo_runs_eagerly_with_a_warning() -> None:
    def fn(x: torch.Tensor) -> torch.Tensor:
        return _Doubling.apply(x * 1).sin()

    # torch 2.11's dynamo passes no dirty_idx: the probe then sees the write to the input itself
    with pytest.warns(UserWarning, match="eagerly: .*autograd.Function.*(marks an input dirty|writes to its inputs)"):
        check(fn, torch.randn(3, requires_grad=True), compile=lambda f: torch.compile(f, backend="conveyor"))


def test_a_dynamo_program_with_a_custom_function_is_not_stored_on_disk(tmp_path: Path) -> None:
    compiled = torch.compile(_with_function, backend="conveyor", options={"cache": True, "cache_dir": str(tmp_path)})
    check(_with_function, *_inputs(), compile=lambda fn: compiled)
    assert _applied(compiled) == 2
    assert not list(tmp_path.rglob("*.program"))
