"""PyTorch's ``test/dynamo/test_misc.py`` and ``test/dynamo/test_input_attr_tracking.py``
programs through conveyor (``dynamo_misc_catalogue`` and ``dynamo_misc_catalogue2``):
writes to inputs and ``out=`` into them, in-place view ops and metadata writes on
inputs, views of inputs returned, ``.grad``/``backward`` inside the program, grad and
inference mode, random numbers, dtype conversions, module and closure state,
attributes on input tensors. Checked against eager with ``conveyor.testing.check`` on
both entries (``conveyor.compile``, ``torch.compile(backend="conveyor")``), without
grad and with grad (inputs as non-leaves requiring grad), by ``dynamo_repro_programs.run``;
programs whose state lives outside their inputs build target and inputs again for
each side (``dynamo_repro_programs.check_subclass``).

Default run: a representative set. Slow (``--runslow``): every program. A known
difference from eager is a strict xfail naming it (the sweep's report:
/work/reports/s13/h_misc.md).
"""

from __future__ import annotations

import sys
import warnings
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import dynamo_misc_catalogue as mc  # noqa: E402
import dynamo_repro_programs as dp  # noqa: E402

PROGRAMS = mc.load()

M1 = (
    "a Python attribute of an input tensor read by a conveyor.compile program: the capture's fake inputs "
    "have none (AttributeError where eager works); open (M1)"
)
M2 = "share_memory_ of a tensor the program makes: the capture's fake tensor has no memory to share; open (M2)"
D1 = (
    "x.data = y.data of another size with grad: eager's backward of x * y raises on the shape, the dynamo "
    "entry's does not: torch.compile(backend='eager') and 'aot_eager' alike, dynamo's own (D1)"
)
D2 = (
    "for y in x: y.add_(1) with grad: eager iterates through unbind, whose views refuse in-place writes; "
    "dynamo indexes x[i], and writes: backend='eager' and 'aot_eager' alike, dynamo's own (D2)"
)

#: (name, entry, grad) -> reason; entry or grad "*" matches either
XFAIL: dict[tuple[str, str, str], str] = {
    ("tensor_property_on_tensor", "conveyor", "nograd"): M1,
    ("const_property_on_tensor", "conveyor", "nograd"): M1,
    ("get_custom_tensor_attribute", "conveyor", "nograd"): M1,
    ("tensor_share_memory", "conveyor", "*"): M2,
    ("set_data_on_input_tensor", "dynamo", "grad"): D1,
    ("tensor_iter", "dynamo", "grad"): D2,
    ("tensor__iter__", "dynamo", "grad"): D2,
}

REPRESENTATIVE = [
    "inplace_view_on_graph_input_t_",
    "set_data_on_input_tensor",
    "itertools_infinite_repeat_mutation",
    "grad",
    "nested_closure_mutation",
]


def xfail_reason(name: str, entry: str, grad: bool) -> str | None:
    g = "grad" if grad else "nograd"
    for e in (entry, "*"):
        for gg in (g, "*"):
            if (name, e, gg) in XFAIL:
                return XFAIL[(name, e, gg)]
    return None


def _cases(names: list[str]) -> list[object]:
    return [
        pytest.param(n, e, g, id=f"{n}-{e}-{'grad' if g else 'nograd'}")
        for n in names
        for e in (["dynamo"] if n in mc.DYNAMO_ONLY else ["conveyor", "dynamo"])
        for g in ([False, True] if n not in mc.NO_GRAD_VARIANT and dp.has_float_input(n, PROGRAMS) else [False])
    ]


def _run(name: str, entry: str, grad: bool, request: pytest.FixtureRequest) -> None:
    reason = xfail_reason(name, entry, grad)
    if reason:
        request.applymarker(pytest.mark.xfail(strict=True, reason=reason))
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="conveyor: (running|compiling)", category=UserWarning)
        if name not in mc.FRESH:
            dp.run(name, entry, "eager", grad, programs=PROGRAMS)
            return
        atol, rtol = dp.TOLERANCE["eager"]
        try:
            dp.check_subclass(PROGRAMS[name], grad, dp.compiler(entry, "eager"), atol, rtol)
        finally:
            import torch

            torch._dynamo.reset()


def test_programs_are_many_and_named_once() -> None:
    assert len(PROGRAMS) >= 90
    assert set(REPRESENTATIVE) <= set(PROGRAMS)
    assert {k[0] for k in XFAIL} <= set(PROGRAMS)
    assert mc.DYNAMO_ONLY | mc.NO_GRAD_VARIANT | mc.FRESH <= set(PROGRAMS)


@pytest.mark.parametrize(("name", "entry", "grad"), _cases(REPRESENTATIVE))
def test_representative_program(name: str, entry: str, grad: bool, request: pytest.FixtureRequest) -> None:
    _run(name, entry, grad, request)


@pytest.mark.slow
@pytest.mark.parametrize(("name", "entry", "grad"), _cases(sorted(PROGRAMS)))
def test_every_program(name: str, entry: str, grad: bool, request: pytest.FixtureRequest) -> None:
    _run(name, entry, grad, request)


# -- what the checker does not compare: Python attributes, .grad, storage, an exception's -----
# state. test_misc.py's test_input_tensor_custom_attr_mutation, test_grad_non_none,
# test_retain_grad, test_storage_return, test_unhandled_exception_in_dynamo.

ENTRIES = ["conveyor", "dynamo"]


def _compiled(entry: str, f: object) -> object:
    import conveyor
    import torch

    torch._dynamo.reset()
    return conveyor.compile(f) if entry == "conveyor" else torch.compile(f, backend="conveyor")


def _quiet(f: object, *a: object) -> object:
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="conveyor: (running|compiling)", category=UserWarning)
        return f(*a)  # type: ignore[operator]


M4 = (
    "Python attributes set on an input tensor by a conveyor.compile program are lost: the trace sets them on "
    "its stand-in, the caller's tensor never gets them, and nothing warns; open (M4)"
)
M6 = (
    "a conveyor.compile program that writes an input and then raises: the exception comes from the trace, "
    "before anything ran, so the caller's input is unwritten where eager's is written; open (M6)"
)


@pytest.mark.parametrize("entry", ENTRIES)
def test_attributes_set_on_an_input_tensor(entry: str, request: pytest.FixtureRequest) -> None:
    import torch

    if entry == "conveyor":
        request.applymarker(pytest.mark.xfail(strict=True, reason=M4))

    def f(x, y, flag):
        x.offloading_activation = flag
        x.y = y
        return x * x.y

    x, y = torch.randn(3), torch.randn(3)
    out = _quiet(_compiled(entry, f), x, y, True)
    torch.testing.assert_close(out, x * y)
    assert getattr(x, "offloading_activation", None) is True and getattr(x, "y", None) is y


@pytest.mark.parametrize("entry", ENTRIES)
def test_grad_of_an_input_added_to(entry: str) -> None:
    import torch

    def f(x, y):
        x.grad.add_(y)
        return torch.abs(y)

    x = torch.randn(2, 2)
    x.grad = grad = torch.arange(4.0).reshape(2, 2)
    _quiet(_compiled(entry, f), x, torch.ones(2, 2))
    assert x.grad is grad
    torch.testing.assert_close(grad, torch.arange(4.0).reshape(2, 2) + 1)


@pytest.mark.parametrize("entry", ENTRIES)
def test_retain_grad_of_an_input(entry: str) -> None:
    import torch

    def f(x, y):
        y.retain_grad()
        return torch.sin(y) + x

    grads = []
    for run in (f, _compiled(entry, f)):
        x = torch.linspace(-1, 1, 4, requires_grad=True)
        y = torch.cos(x)
        _quiet(run, x, y).sum().backward()
        grads.append(y.grad)
    assert grads[1] is not None
    torch.testing.assert_close(grads[1], grads[0])


@pytest.mark.parametrize("entry", ENTRIES)
def test_storage_of_an_input_resized_to_nothing(entry: str) -> None:
    """Under conveyor.compile the caller's storage kept its bytes, silently (Note [A storage
    resized in the program]: it compiles through dynamo now)."""
    import torch

    def f(x):
        y = torch.sin(x + 1)
        x.untyped_storage().resize_(0)
        return torch.cos(y)

    x = torch.linspace(-1, 1, 10)
    expected = torch.cos(torch.sin(x + 1))
    out = _quiet(_compiled(entry, f), x)
    torch.testing.assert_close(out, expected)
    assert x.untyped_storage().size() == 0


@pytest.mark.parametrize("entry", ENTRIES)
def test_an_input_written_before_an_exception(entry: str, request: pytest.FixtureRequest) -> None:
    import torch

    if entry == "conveyor":
        request.applymarker(pytest.mark.xfail(strict=True, reason=M6))

    def f(a):
        a += 1
        raise RuntimeError("smoge")

    a = torch.zeros(2)
    with pytest.raises(RuntimeError, match="smoge"):
        _quiet(_compiled(entry, f), a)
    torch.testing.assert_close(a, torch.ones(2))
