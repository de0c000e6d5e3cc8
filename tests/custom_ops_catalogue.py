"""Programs around custom operators (``torch.library``), rewritten compactly from
PyTorch's ``test/inductor/test_auto_functionalize.py`` (stored version 06bb9e2)
and ``test/test_custom_ops.py`` (``TestCustomOpAPI``, stored version 00b0ce4):
mutating custom ops (``mutates_args``, hand-written schemas with ``Tensor(a!)``,
optional and list arguments, the ``inplace`` and ``out`` tags), ops called on
views and aliases of inputs, ``register_fake`` with data-dependent sizes,
``register_autograd`` with defaulted, keyword-only and list arguments, and a
custom op whose output is a view of its input.

Every op lives in the namespace ``conveyor_sweep5`` (``torch.library.custom_op``
replaces an op of the same name, so importing this module twice is harmless).
Names are the upstream tests' without ``test_`` (prefix ``af_`` for
test_auto_functionalize, ``co_`` for test_custom_ops). :mod:`custom_ops_programs`
runs them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

NS = "conveyor_sweep5"
Make = Callable[[], list[Any]]


@dataclasses.dataclass(frozen=True)
class Program:
    """A program, a function making its inputs, and how it is called."""

    name: str
    fn: Callable[..., Any]
    make: Make
    #: run with every floating-point input requiring grad too
    grad: bool = True
    #: call both sides under ``torch.inference_mode()``
    inference: bool = False
    #: dynamo settings the program needs (data-dependent output sizes)
    dynamo_config: tuple[tuple[str, Any], ...] = ()


PROGRAMS: dict[str, Program] = {}


def program(name: str, make: Make, **kw: Any) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    def register(fn: Callable[..., Any]) -> Callable[..., Any]:
        assert name not in PROGRAMS, name
        PROGRAMS[name] = Program(name, fn, make, **kw)
        return fn

    return register


def randn(*shapes: tuple[int, ...]) -> Make:
    return lambda: [torch.randn(*s) for s in shapes]


def op(name: str, schema: str | None = None, mutates: Any = (), **kw: Any) -> Callable[[Callable[..., Any]], Any]:
    """``torch.library.custom_op`` in this module's namespace."""
    return lambda f: torch.library.custom_op(f"{NS}::{name}", mutates_args=mutates, schema=schema, **kw)(f)


def ops() -> Any:
    return getattr(torch.ops, NS)


DATA_DEP = (("capture_dynamic_output_shape_ops", True), ("capture_scalar_outputs", True))

# -- test_auto_functionalize.py ---------------------------------------------------------


@op("af_with_default", "(Tensor a, int b, Tensor(d!)? c=None, Tensor? d=None, int e=-1) -> ()", mutates={"c"})
def _af_with_default(a, b, c=None, d=None, e=-1):
    a + b


program("af_with_default", lambda: [torch.tensor([10, 10, 10])])(lambda a: ops().af_with_default(a, 0))


@op("af_none_return", "(Tensor x, Tensor(a!) out) -> ()", mutates={"out"})
def _af_none_return(x, out):
    out.copy_(x)


program("af_none_return", lambda: [torch.randn(3), torch.zeros(3)])(lambda x, out: ops().af_none_return(x, out))


@op("af_self", "(Tensor(a!) self) -> ()", mutates={"self"})
def _af_self(self):
    self.sin_()


program("af_self_as_mutate_arg", randn((3,)))(lambda x: ops().af_self(x))


@op("af_tensorlist", "(Tensor src, SymInt[] sizes, int dim, Tensor(a!)[] out) -> ()", mutates={"out"})
def _af_tensorlist(src, sizes, dim, out):
    for o in out:
        o.copy_(src)


@program("af_tensorlist", lambda: [torch.ones(4), [torch.empty(4), torch.empty(4)]], grad=False)
def _p_af_tensorlist(src, out):
    ops().af_tensorlist(src, [2, 3], 0, out)


@op("af_foo", "(Tensor(a!) x, Tensor[] y, Tensor(b!) z, SymInt w, Tensor n) -> ()", mutates={"x", "z"})
def _af_foo(x, y, z, w, n):
    x.add_(y[0] + w)
    z.add_(y[1] + n)


@program("af_v2", randn((3,), (3,), (3,), (3,), (3,)))
def _p_af_v2(x, y0, y1, z, n):
    ops().af_foo(x, [y0, y1], z, 2, n)


@op(
    "af_foo_ret", "(Tensor(a!) x, Tensor[] y, Tensor(b!) z, SymInt w, Tensor n) -> (Tensor, Tensor)", mutates={"x", "z"}
)
def _af_foo_ret(x, y, z, w, n):
    x.add_(y[0] + w)
    z.add_(y[1] + n)
    return y[0] + w, y[1] + n


@_af_foo_ret.register_fake
def _(x, y, z, w, n):
    return y[0] + w, y[1] + n


@program("af_with_returns_v2", randn((3,), (3,), (3,), (3,), (3,)))
def _p_af_with_returns(x, y0, y1, z, n):
    return ops().af_foo_ret(x, [y0, y1], z, 2, n)


@op("af_sin_np", "(Tensor(a!) x) -> ()", mutates={"x"})
def _af_sin_np(x):
    x_np = x.detach().numpy()  # a view of x's memory
    import numpy as np

    np.sin(x_np, out=x_np)


@program("af_on_view", randn((3,)))
def _p_af_on_view(x):
    x = x.clone()
    y = x[:]
    ops().af_sin_np(y)
    return x


@op("af_opt", "(Tensor(a!)? x, Tensor[] y, Tensor(b!)? z, SymInt w, Tensor n) -> ()", mutates={"x", "z"})
def _af_opt(x, y, z, w, n):
    if x is not None:
        x.add_(y[0] + w)
    if z is not None:
        z.add_(y[1] + n)


@program("af_optional_v2", randn((3,), (3,), (3,), (3,)))
def _p_af_optional(y0, y1, z, n):
    ops().af_opt(None, [y0, y1], z, 2, n)


@op("af_sin2", "(Tensor(a!) x, Tensor(b!) y) -> ()", mutates={"x", "y"})
def _af_sin2(x, y):
    x.sin_()
    y.sin_()


@program("af_extra1", randn((2,), (2,)))
def _p_af_extra1(x, y):
    ops().af_sin2(x, y)
    return x + y


@program("af_extra2", randn((2,)))
def _p_af_extra2(x):
    ops().af_sin2(x[0], x[1])


@program("af_extra3", randn((2,)))
def _p_af_extra3(x):
    a, b = x[0], x[1]
    ops().af_sin2(a, b)
    return a, b, x


@program("af_extra5", lambda: list(torch.randn(2, 2).unbind(0)))
def _p_af_extra5(x, y):
    return ops().af_sin2(x, y)


@op("af_list", "(Tensor(a!) x, Tensor(b!)[] y) -> ()", mutates={"x", "y"})
def _af_list(x, y):
    x.sin_()
    y[0].sin_()


@program("af_extra4", randn((2,), (2,), (2,)))
def _p_af_extra4(x, y, z):
    ops().af_list(x[0], [z[0], y])


@program("af_alias", randn((2,)))
def _p_af_alias(x):
    a = torch.ops.aten.alias.default(x)
    b = torch.ops.aten.alias.default(x)
    ops().af_sin2(a, b)
    return a, b, x


@program("af_split", randn((10, 10)))
def _p_af_split(x):
    a, b = x.split([4, 6], dim=1)
    ops().af_sin2(a, b)
    return a, b, x


@program("af_slice", randn((10, 10)))
def _p_af_slice(x):
    a = torch.ops.aten.slice.Tensor(x, 0, 0, 2)
    b = torch.ops.aten.slice.Tensor(x, 1, 3, 4)
    ops().af_sin2(a, b)
    return a, b, x


@program("af_alias2", lambda: [torch.tensor([1.0, 0.0, 2.0])], dynamo_config=DATA_DEP)
def _p_af_alias2(x):
    a = torch.ops.aten.alias.default(x)
    d = torch.ops.aten.slice(x.clone().nonzero().float())
    ops().af_sin2(a, d)
    return a, d


@program("af_graph_input_is_view", lambda: [torch.tensor([[1.0, 2.0], [3.0, 4.0]])[1]])
def _p_af_graph_input_is_view(x):
    ops().af_noop(x[0])


@op("af_noop", "(Tensor(a!) x) -> ()", mutates={"x"})
def _af_noop(x):
    pass


@op("af_noop2", "(Tensor(a!) x, Tensor(b!) y) -> ()", mutates={"x", "y"})
def _af_noop2(x, y):
    pass


@program("af_alias_id_output", randn((2, 2)))
def _p_af_alias_id_output(x):
    a = torch.ops.aten.alias.default(x)
    ops().af_noop2(a, x)
    return a


@op("af_workspace", mutates={"workspace"})
def _af_workspace(x: Tensor, workspace: Tensor) -> Tensor:
    return x.clone()


_af_workspace.register_fake(lambda x, workspace: x.clone())


@program("af_inference_mode_view", randn((2,), (2,)), inference=True)
def _p_af_inference_mode_view(x, w):
    return _af_workspace(x, w).view(-1).sin()


for _n in ("af_extra1", "af_extra2", "af_extra3", "af_extra4"):
    program(f"{_n}_inference_mode", PROGRAMS[_n].make, inference=True)(PROGRAMS[_n].fn)


@op("af_mk_image", mutates={"decoder"}, device_types=["cpu"])
def _af_mk_image(decoder: Tensor) -> Tensor:
    return torch.ones(2, 3, 4, 5)


@_af_mk_image.register_fake
def _(decoder):
    return torch.empty([torch.library.get_ctx().new_dynamic_size() for _ in range(4)])


program("af_unbacked_auto_functionalize_op", lambda: [torch.zeros(100, dtype=torch.int64)], dynamo_config=DATA_DEP)(
    lambda x: _af_mk_image(x)
)
