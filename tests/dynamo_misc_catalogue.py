"""Programs transcribed from PyTorch's ``test/dynamo/test_misc.py`` (class ``MiscTests``,
``TestCustomFunction``, ``MiscTestsDevice`` on CPU) and ``test/dynamo/test_input_attr_tracking.py``
(pytorch/pytorch at 001077cbc0f328b8a743c7a2d1bf64f98c096377 and
09b1b661104e429cf63548df15bbf8c0099c82e7): the programs that touch what conveyor's
front end handles. This file: in-place ops and writes to inputs, ``out=`` into inputs
(resized), in-place view ops and metadata writes on inputs (``resize_``, ``t_``,
``as_strided_``, ``x.data = ...``), views of inputs returned. ``dynamo_misc_catalogue2``:
``requires_grad``/``.grad``, grad mode and other context managers, random numbers,
dtype conversions; ``dynamo_misc_catalogue3``: module and closure state, tensor attributes.

Names are the upstream tests' without ``test_`` (a suffix numbers further programs of
one test); bodies rewritten compactly with small inputs. :data:`PROGRAMS` is run by
``test_dynamo_misc_programs.py`` through ``dynamo_repro_programs.run`` (both entries,
with and without grad), except:

* :data:`DYNAMO_ONLY`: programs taking Python objects (dataclasses, memory formats,
  modules as arguments) that only ``torch.compile`` takes;
* :data:`NO_GRAD_VARIANT`: programs whose inputs must stay as made (leaves requiring
  grad, ``.grad`` set), not turned into non-leaves by the harness;
* :data:`FRESH`: programs whose state lives outside the inputs the checker clones
  (closures, attributes set on input tensors, objects mutated in place): each side
  gets its own target and inputs, built again from the seed
  (``dynamo_repro_programs.check_subclass``).
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from typing import Any

import torch
from dynamo_repro_programs import Make, Program, args, randn

PROGRAMS: dict[str, Program] = {}
DYNAMO_ONLY: set[str] = set()
NO_GRAD_VARIANT: set[str] = set()
FRESH: set[str] = set()


def program(
    name: str,
    make: Make,
    calls: int = 1,
    *,
    dynamo_only: bool = False,
    no_grad_variant: bool = False,
    fresh: bool = False,
) -> Callable[[Callable[[], Any]], Callable[[], Any]]:
    """Register ``build`` (returning the function or module to compile) under ``name``."""

    def register(build: Callable[[], Any]) -> Callable[[], Any]:
        assert name not in PROGRAMS, name
        PROGRAMS[name] = Program(name, build, make, calls)
        for flag, names in ((dynamo_only, DYNAMO_ONLY), (no_grad_variant, NO_GRAD_VARIANT), (fresh, FRESH)):
            if flag:
                names.add(name)
        return build

    return register


def fn(name: str, make: Make, calls: int = 1, **flags: bool) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a plain function ``f`` (built as itself) under ``name``."""

    def register(f: Callable[..., Any]) -> Callable[..., Any]:
        program(name, make, calls, **flags)(lambda: f)
        return f

    return register


# -- out= into inputs, writes to inputs and to tensors made inside --------------------------


@fn("scalar_device_movement", args(lambda: 2, lambda: 3, lambda: torch.tensor(0.0)))
def _scalar_device_movement(a, b, out):
    return torch.add(a, b, out=out)


@fn("inplace", randn((10, 10), (10, 10)))
def _inplace(a, b):
    o = torch.empty((10, 10))
    o.copy_(a)
    o -= b
    return o


@fn("inplace_desugaring", randn((3,)))
def _inplace_desugaring(y):
    x0 = 1
    x0 += y
    x1 = 1
    x1 -= y
    return x0, x1


@fn("unpack4", randn((10, 10), (10, 10)))
def _unpack4(a, b):
    a = a[:5, :]
    b = b[:5, :]
    x, y = a.size()
    o = torch.empty((x, y))
    o.copy_(a / b)
    return o


@fn("tensor_setattr_getset_descriptor", args(lambda: torch.ones(5, dtype=torch.cfloat)))
def _tensor_setattr_getset_descriptor(x):
    x.real = 10
    return x + 1


@fn("tensor_iter", randn((10, 10)))
def _tensor_iter(x):
    for y in x:
        y.add_(1.0)
    return y


@fn("tensor__iter__", randn((6, 4)))
def _tensor__iter__(x):
    it = x.__iter__()
    for y in it:
        y.add_(1.0)
    return y


@fn("range_with_shape", randn((10,)))
def _range_with_shape(a):
    for _ in range(1, a.shape[0]):
        a += 1
    return a


@fn(
    "tensor_dict3",
    args(
        lambda: {"a": torch.tensor([100.0]), "b": torch.tensor([200.0])},
        lambda: {"b": torch.tensor([3.0]), "c": torch.tensor([4.0])},
    ),
)
def _tensor_dict3(inputs_a, inputs_b):
    total = torch.zeros(1)
    for k in sorted(inputs_a.keys() | inputs_b.keys()):
        if k in inputs_a:
            total += inputs_a[k]
        if k in inputs_b:
            total += inputs_b[k]
    return total


@fn("repeat_interleave_graphbreaks", randn((2, 3, 1, 4)))
def _repeat_interleave_no_breaks(x):
    x += 1
    x = torch.repeat_interleave(x, 2, 3)
    x += 1
    return x


@fn("repeat_interleave_graphbreaks_2", randn((2, 3, 1, 4)))
def _repeat_interleave_has_breaks(x):
    x += 1
    x = torch.repeat_interleave(x, torch.tensor(2), 3)
    x += 1
    return x


@fn("itertools_repeat", randn((2, 5)))
def _itertools_repeat(x):
    for i in itertools.repeat(100.0, 5):
        x += i
    return x


@fn("itertools_infinite_repeat_mutation", randn((2, 5)))
def _itertools_infinite_repeat_mutation(x):
    idx = 0
    for i in itertools.repeat(x):  # i is x: x += x, then x += 1 through the alias
        x += i
        i += 1
        idx += 1
        if idx > 10:
            break
    return x


@fn("itertools_infinite_count", randn((2, 5)))
def _itertools_infinite_count(x):
    idx = 0
    for i in itertools.count(5, -1):
        x += i
        idx += 1
        if idx > 10:
            break
    return x


@fn("itertools_infinite_cycle", randn((2, 5)))
def _itertools_infinite_cycle(x):
    for iterator in (iter([]), iter([10, 11.0]), itertools.repeat(-1, 3), itertools.count(10)):
        r = itertools.cycle(iterator)
        idx = 0
        x += 1
        for i in r:
            x += i
            idx += 1
            if idx > 10:
                break
    return x


@fn("itertools_accumulate_symint_default_sum", randn((2, 3)))
def _itertools_accumulate_symint(x):
    for i in itertools.accumulate([x.size(0), x.size(1)]):
        x *= i
    return x


@fn("dynamic_fill_diagonal_", args(lambda: torch.zeros(4, 4)))
def _dynamic_fill_diagonal_(x):
    x.fill_diagonal_(True)


@fn("tuple_from_tuple_iter", randn((4, 4), (4, 4), (4, 4)))
def _tuple_from_tuple_iter(a, b, c):
    def inner_fn(*args):
        acc = torch.ones(4, 4)
        for arg in args:
            acc.add_(arg)
        return acc

    return inner_fn(*tuple(iter((a, b, c))))


@fn("compiled_class_graph_break", randn((3,)))
def _compiled_class_graph_break(x):
    x += 1

    class C:
        pass

    return x.sin()


@fn("unhandled_exception_in_dynamo", randn((2,)))
def _unhandled_exception(a):
    a += 1
    raise RuntimeError("smoge")


@fn("replay_side_effects_input_mut", randn((4, 4)))
def _replay_side_effects_input_mut(x):
    x.add_(5)
    return x.cos()


@fn(
    "sym_constrain_range_on_replaced_unbacked_symbol",
    args(lambda: torch.randn(16, 10), lambda: torch.randn(16, 10), lambda: torch.tensor(25)),
)
def _sym_constrain_range(x, y, z):
    z += 7
    u0 = z.item()
    s0, s1 = x.size(0), y.size(0)
    torch._check(s0 < 100)
    torch._check(s1 < 100)
    torch._check(u0 == s0 + s1)
    return x, y, z


@fn("symint_copy_into_unbacked_slice", args(lambda: torch.zeros(1, 2, 6, 3), lambda: torch.tensor([0])))
def _symint_copy_into_unbacked_slice(a, x):
    u0 = torch.tensor(x[0].to(torch.int64).item()).item()
    B, H, T, D = a.shape
    b = torch.cat([a, torch.zeros((B, H, u0, D), dtype=torch.float64)], dim=2)
    b[:, :, :6, :] = torch.randn(B, H, 6, D)
    return b


@fn(
    "argwhere_with_dynamic_shapes",
    args(lambda: torch.tensor([1, 2, 3, 5, 6, 7]), lambda: torch.tensor([0, 3, 4, 5, 7])),
)
def _argwhere(tensor, mapping):
    xx, yy = torch.meshgrid(mapping, tensor, indexing="ij")
    indices = torch.argwhere(xx == yy)
    mapped_values = torch.zeros_like(tensor)
    mapped_values[indices[:, 1]] = indices[:, 0]
    return mapped_values


# -- out= resizing inputs -------------------------------------------------------------------


@fn("out_variants_with_resizing_on_graph_inputs", randn((2, 3), (4,)))
def _out_resizing(x, y):
    return torch.cosh(x, out=y) + 1


@fn(
    "out_variants_with_resizing_on_graph_inputs_with_dynamic",
    args(lambda: {"input": torch.randn(6), "vec2": torch.randn(1), "out": torch.zeros(6, 1)}),
)
def _out_outer_kwargs(inputs):
    return torch.outer(**inputs)


@fn(
    "out_variants_with_resizing_on_graph_inputs_with_dynamic1",
    args(lambda: torch.zeros(0), lambda: torch.ones(3, 3), lambda: torch.ones(3)),
)
def _mv_out(a, b, c):
    torch.mv(b, c, out=a)
    return a


# -- in-place view ops and metadata writes on inputs: test_inplace_view_on_graph_input ----


def _roomy(room: int, *size: int) -> torch.Tensor:
    """A tensor of ``size`` whose storage holds ``room`` known values (``arange``), so
    that ``resize_`` growing it within the storage exposes values, not new memory."""
    return torch.arange(float(room)).resize_(*size)


_INPLACE_VIEW = {
    "resize_": (lambda x: x.resize_(6).mul_(2), lambda: _roomy(8, 4)),
    "t_": (lambda x: x.t_().mul_(2), lambda: torch.rand(2, 3)),
    "transpose_": (lambda x: x.transpose_(0, 1).mul_(2), lambda: torch.rand(2, 3)),
    "squeeze_": (lambda x: x.squeeze_().mul_(2), lambda: torch.rand(1, 2, 3)),
    "unsqueeze_": (lambda x: x.unsqueeze_(0).mul_(2), lambda: torch.rand(2, 3)),
    "resize_as_": (lambda x: x.resize_as_(torch.rand(4, 3)), lambda: _roomy(12, 2, 3)),
    "swapaxes_": (lambda x: x.swapaxes_(0, 1).mul_(2), lambda: torch.rand(2, 3)),
    "swapdims_": (lambda x: x.swapdims_(0, 1).mul_(2), lambda: torch.rand(2, 3)),
    "as_strided_": (lambda x: x.as_strided_((3, 2), (2, 1)).mul_(2), lambda: torch.rand(2, 3)),
    "detach_": (lambda x: x.detach_().mul_(2), lambda: torch.rand(2, 3)),
}
for _name, (_f, _make) in _INPLACE_VIEW.items():
    fn(f"inplace_view_on_graph_input_{_name}", args(_make))(lambda x, f=_f: (f(x), x))


# -- views of inputs returned, metadata writes ------------------------------------------------


@fn("tensor_call_obj_hasattr_view", randn((10,)))
def _tensor_call_obj_hasattr_view(x):
    return getattr(x, "view", None)(10)


@fn("torch_size", randn((100,)))
def _torch_size(x):
    return (x.view(*torch.Size([10, 10])),)


@fn("data_access_in_inference_mode", randn((3,)))
def _data_access(x):
    return x.data


@fn("tensor_data", args(lambda: torch.rand(8), lambda: torch.ones(8).to(torch.int)))
def _tensor_data(x, y):
    return x[y.data]


@fn("dynamic_shapes_as_strided", randn((3,)))
def _dynamic_shapes_as_strided(t):
    tmp = t.as_strided([0, 3], [3, 1]).view(-1)
    return t * tmp.sum()


@fn("make_contiguous_strides_for_under_compile", randn((4, 8)))
def _make_contiguous_strides_for(x):
    from torch._prims_common import make_contiguous_strides_for

    return x.as_strided(x.shape, make_contiguous_strides_for(x.shape))


@fn("set_data_on_input_tensor", randn((5, 5), (2, 2)))
def _set_data_on_input_tensor(x, y):
    x.data = y.data
    if x.size() == y.size():
        return x * y
    return y * y


@fn("set_data_on_input_tensor_same_size", randn((3, 3), (3, 3)))
def _set_data_same_size(x, y):
    x.data = y.data
    return x * y, x


@fn("set_data_on_scoped_tensor", randn((5, 5)))
def _set_data_on_scoped_tensor(x):
    z = torch.zeros([4, 4])
    z.data = x.data
    if x.size() == z.size():
        return z * x
    return x


@fn("set_data_on_functionaltensor", args(lambda: torch.ones(5), lambda: torch.zeros(5)))
def _set_data_plain(x, y):
    x.data = y
    return x + 1


def load() -> dict[str, Program]:
    """Every part's programs (``dynamo_misc_catalogue2`` and ``3`` register here)."""
    import dynamo_misc_catalogue2  # noqa: F401
    import dynamo_misc_catalogue3  # noqa: F401

    return PROGRAMS
