"""Random-program families for tests/test_fuzz_aliasing_families.py: ``set_``
and ``Tensor.data`` and ``requires_grad_`` on inputs (``setdata``), complex
views (``cplx``) and dtype views written through (``dtview``), mixed with the
in-place and metadata ops of synthetic_base's hypothesis test (its strategies
imported by path, not copied).

Each family draws ``(shape, inputs, ops, requires_grad, ret)``; ``make(ex)``
gives the program and a function making its inputs. An op is
``(i, name)``: ``name`` applied to input ``i``, with input ``i + 1`` (cyclic)
as the other operand; ``"F:<name>"`` is one of the hypothesis test's
``FULL_OPS``. ``KNOWN`` lists the ops left out of the drawn programs while a
bug they find is open (see the strict xfails of the test module).
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from hypothesis import strategies as st

_PATH = Path(__file__).parents[1] / "packages/synthetic_base/tests/test_synthetic_base_hypothesis.py"
_SPEC = importlib.util.spec_from_file_location("_synthetic_base_fuzz_strategies_families", _PATH)
assert _SPEC is not None and _SPEC.loader is not None
base = importlib.util.module_from_spec(_SPEC)
sys.modules[_SPEC.name] = base  # dynamo imports a traced function's module by name
_SPEC.loader.exec_module(base)

Op = Callable[[torch.Tensor, torch.Tensor, list[Any]], Any]
SIGN64 = -(2**63)


def _no_grad(fn: Op) -> Op:
    def op(t: torch.Tensor, o: torch.Tensor, outs: list[Any]) -> None:
        with torch.no_grad():
            fn(t, o, outs)

    return op


def _data_assign(t: torch.Tensor, o: torch.Tensor, outs: list[Any]) -> None:
    t.data = o * 2


def _data_view_write(t: torch.Tensor, o: torch.Tensor, outs: list[Any]) -> None:
    if t.dim():
        t.data[..., :1].mul_(3)


def _set_geometry(t: torch.Tensor, o: torch.Tensor, outs: list[Any]) -> None:
    if t.numel():
        t.set_(t.untyped_storage(), t.storage_offset(), (1,), (1,))


def _detached_requires_grad(t: torch.Tensor, o: torch.Tensor, outs: list[Any]) -> None:
    outs.append(t.detach().requires_grad_() * 2)


SETDATA: dict[str, Op] = {
    "set_other": lambda t, o, outs: t.set_(o),
    "set_other_no_grad": _no_grad(lambda t, o, outs: t.set_(o)),
    "set_detached": lambda t, o, outs: t.set_(o.detach()),
    "set_fresh_no_grad": _no_grad(lambda t, o, outs: t.set_(torch.zeros(2, dtype=t.dtype))),
    "set_storage_no_grad": _no_grad(
        lambda t, o, outs: t.set_(o.untyped_storage(), o.storage_offset(), o.size(), o.stride())
    ),
    "set_geometry_no_grad": _no_grad(_set_geometry),
    "set_empty_no_grad": _no_grad(lambda t, o, outs: t.set_()),
    "data_assign": _data_assign,
    "data_add_": lambda t, o, outs: t.data.add_(1),
    "data_view_write": _data_view_write,
    "requires_grad_true": lambda t, o, outs: t.requires_grad_(True),
    "requires_grad_false": lambda t, o, outs: t.requires_grad_(False),
    "detached_requires_grad": _detached_requires_grad,
    "read_other": lambda t, o, outs: outs.append(t.sum() * o.sum()),
}


def _complex(fn: Op) -> Op:
    def op(t: torch.Tensor, o: torch.Tensor, outs: list[Any]) -> None:
        if t.is_complex():
            fn(t, o, outs)

    return op


def _as_complex(fn: Op) -> Op:
    """``fn`` on ``view_as_complex(t)`` where t's layout allows it."""

    def op(t: torch.Tensor, o: torch.Tensor, outs: list[Any]) -> None:
        if (
            t.dim()
            and t.dtype == torch.float64
            and t.shape[-1] == 2
            and t.stride(-1) == 1
            and t.storage_offset() % 2 == 0
            and all(s % 2 == 0 for s in t.stride()[:-1])
        ):
            fn(torch.view_as_complex(t), o, outs)

    return op


def _imag_fill_no_grad(t: torch.Tensor, o: torch.Tensor, outs: list[Any]) -> None:
    with torch.no_grad():
        t.imag.fill_(0.5)


def _float_view_add(t: torch.Tensor, o: torch.Tensor, outs: list[Any]) -> None:
    if t.dim() and t.stride(-1) == 1:
        t.view(torch.float64).add_(1)


CPLX: dict[str, Op] = {
    "real_add_": _complex(lambda t, o, outs: t.real.add_(1)),
    "imag_mul_": _complex(lambda t, o, outs: t.imag.mul_(2)),
    "imag_fill_no_grad": _complex(_imag_fill_no_grad),
    "as_real_first_sub_": _complex(lambda t, o, outs: torch.view_as_real(t)[..., 0].sub_(1)),
    "as_real_out": _complex(lambda t, o, outs: outs.append(torch.view_as_real(t))),
    "real_out": _complex(lambda t, o, outs: outs.append(t.real)),
    "imag_out": _complex(lambda t, o, outs: outs.append(t.imag)),
    "round_trip_mul_": _complex(lambda t, o, outs: torch.view_as_complex(torch.view_as_real(t)).mul_(1j)),
    "mul_j_": _complex(lambda t, o, outs: t.mul_(1j)),
    "float_view_add_": _complex(_float_view_add),
    "conj_physical_": _complex(lambda t, o, outs: t.conj_physical_()),
    "abs_out": _complex(lambda t, o, outs: outs.append(t.abs())),
    "real_detached_write": _complex(lambda t, o, outs: t.real.detach().mul_(-1)),
    "as_complex_mul_": _as_complex(lambda c, o, outs: c.mul_(1j)),
    "as_complex_out": _as_complex(lambda c, o, outs: outs.append(c)),
    "as_complex_real_add_": _as_complex(lambda c, o, outs: c.real.add_(3)),
}


def _float64(fn: Op, last_dense: bool = False) -> Op:
    def op(t: torch.Tensor, o: torch.Tensor, outs: list[Any]) -> None:
        if t.dtype == torch.float64 and (not last_dense or (t.dim() and t.stride(-1) == 1)):
            fn(t, o, outs)

    return op


def _int_sign_no_grad(t: torch.Tensor, o: torch.Tensor, outs: list[Any]) -> None:
    with torch.no_grad():
        t.view(torch.int64).bitwise_xor_(SIGN64)


DTVIEW: dict[str, Op] = {
    "int_sign_": _float64(lambda t, o, outs: t.view(torch.int64).bitwise_xor_(SIGN64)),
    "int_sign_no_grad": _float64(_int_sign_no_grad),
    "int_double_": _float64(lambda t, o, outs: t.view(torch.int64).add_(1 << 52)),
    "int_out": _float64(lambda t, o, outs: outs.append(t.view(torch.int64))),
    "int_read": _float64(lambda t, o, outs: outs.append(t.view(torch.int64) + 1)),
    "byte_sign_": _float64(lambda t, o, outs: t.view(torch.uint8)[..., 7::8].bitwise_xor_(0x80), last_dense=True),
    "half_word_neg_": _float64(lambda t, o, outs: t.view(torch.float32)[..., 1::2].mul_(-1), last_dense=True),
    "int32_out": _float64(lambda t, o, outs: outs.append(t.view(torch.int32)), last_dense=True),
}

#: ops left out of the drawn programs while the bug they find is open:
#: family -> requires_grad -> {op: bug}
KNOWN: dict[str, dict[bool, dict[str, str]]] = {
    "setdata": {
        # (B14, a no-grad set_() of an input overlapping another, B15, a .data write of a saved tensor, and
        # B18, x.data = ... twice behind dynamo on torch 2.13, are fixed: warned eager runs)
        False: {},
        # (x.data = ... of a view under grad behind dynamo on torch 2.14, aten.shallow_copy_data_, is fixed: a warned
        # eager run.) Left out: dynamo itself keeps x's old layout for a later `x.is_contiguous()` branch, so random
        # programs differ from eager under torch.compile(backend="eager") too, on every torch
        True: {"data_assign": "dynamo's own: x's layout after x.data = ... (backend='eager' too)"},
    },
    # (B11, a write through a slice or select of a complex tensor requiring grad, is fixed: the scatter is
    # spelled on the real views; B12, a write through a dtype view of a tensor requiring grad: warned eager runs)
    "cplx": {False: {}, True: {}},
    "dtview": {False: {}, True: {}},
}


def _roots(shape: tuple[int, ...], requires_grad: bool, dtype: torch.dtype, seed: int) -> torch.Tensor:
    r = torch.randn(shape, dtype=dtype, generator=torch.Generator().manual_seed(seed))
    return r.requires_grad_() * 1 if requires_grad else r


@st.composite
def _view_of(draw: Any, rows: int, cols: int, roots: int) -> tuple[str, Callable[..., torch.Tensor]]:
    """A view (of the hypothesis test's kinds) of one of ``roots`` roots."""
    k = draw(st.integers(0, roots - 1))
    name, view = draw(base.overlapping_views(rows, cols))
    return f"{k}:{name}", lambda *rs: view(rs[k])


_PAIR_VIEWS: dict[str, Callable[[torch.Tensor, int], torch.Tensor]] = {
    "r": lambda r, a: r,
    "r[a:]": lambda r, a: r[a:],
    "r[:, a:]": lambda r, a: r[:, a:],
    "r.transpose(0, 1)": lambda r, a: r.transpose(0, 1),
    "r[::2]": lambda r, a: r[::2],
    "r[..., :1]": lambda r, a: r[..., :1],
}


@st.composite
def _pair_view(draw: Any, rows: int) -> tuple[str, Callable[..., torch.Tensor]]:
    """A view of the ``(rows, cols, 2)`` float64 root of ``cplx`` (some of
    them ``view_as_complex`` can take)."""
    name, a = draw(st.sampled_from(sorted(_PAIR_VIEWS))), draw(st.integers(0, rows - 1))
    return f"1:{name.replace('a', str(a))}", lambda *rs: _PAIR_VIEWS[name](rs[1], a)


@st.composite
def programs(draw: Any, family: str) -> tuple[Any, ...]:
    rows, cols = draw(st.integers(2, 4)), draw(st.integers(2, 4))
    requires_grad = draw(st.booleans())
    view = _view_of(rows, cols, 1 if family == "cplx" else 2)
    if family == "cplx":
        view = st.one_of(view, view, view, _pair_view(rows))
    inputs = draw(st.lists(view, min_size=1, max_size=3))
    table = {"setdata": SETDATA, "cplx": CPLX, "dtview": DTVIEW}[family]
    full = base.FULL_GRAD_OPS if requires_grad else sorted(base.FULL_OPS)
    known = KNOWN[family][requires_grad]
    names = sorted(set(table) - set(known))
    full_names = sorted({"F:" + n for n in full} - set(known))
    op = st.tuples(st.integers(0, len(inputs) - 1), st.sampled_from(names))
    ops = draw(
        st.lists(
            st.one_of(op, op, st.tuples(st.integers(0, len(inputs) - 1), st.sampled_from(full_names))),
            min_size=1,
            max_size=4,
        )
    )
    ret = draw(st.sampled_from(["mul1", "inputs", "none"]))
    return family, (rows, cols), inputs, ops, requires_grad, ret


def make(example: tuple[Any, ...]) -> tuple[Callable[..., Any], Callable[[], list[torch.Tensor]]]:
    """The program and a maker of its inputs (views of two roots: complex and
    float64 ``(rows, cols, 2)`` for ``cplx``, two float64 roots otherwise)."""
    family, shape, inputs, ops, requires_grad, ret = example
    table = {"setdata": SETDATA, "cplx": CPLX, "dtview": DTVIEW}[family]

    def program(*ins: torch.Tensor) -> tuple[Any, ...]:
        outs: list[Any] = []
        for i, name in ops:
            if name.startswith("F:"):
                base.FULL_OPS[name[2:]](ins[i])
            else:
                table[name](ins[i], ins[(i + 1) % len(ins)], outs)
        head = tuple(t * 1 for t in ins) if ret == "mul1" else tuple(ins) if ret == "inputs" else ()
        return head + tuple(outs)

    def make_inputs() -> list[torch.Tensor]:
        if family == "cplx":
            roots = (
                _roots(shape, requires_grad, torch.complex128, 0),
                _roots((*shape, 2), requires_grad, torch.float64, 1),
            )
        else:
            roots = (_roots(shape, requires_grad, torch.float64, 0), _roots(shape, requires_grad, torch.float64, 1))
        return [view(*roots) for _, view in inputs]

    return program, make_inputs
