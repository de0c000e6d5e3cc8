"""Programs transcribed from PyTorch's ``test/dynamo/test_misc.py`` and
``test/dynamo/test_input_attr_tracking.py`` (third part, see ``dynamo_misc_catalogue``):
module and closure state written across calls, attributes on input tensors (read and
set), objects taken as arguments and mutated in place. Registered in
:data:`dynamo_misc_catalogue.PROGRAMS`."""

from __future__ import annotations

import dataclasses

import torch
import torch.utils._pytree as pytree
from dynamo_misc_catalogue import fn, program
from dynamo_repro_programs import args, randn
from torch import nn

# -- module and closure state -------------------------------------------------------------


class _SideEffectsAttr(nn.Module):
    """test_replay_side_effects_model_attr: a constant and a tensor attribute rebound."""

    def __init__(self) -> None:
        super().__init__()
        self.const = 4
        self.tensor = None

    def forward(self, x):
        prev = self.tensor if self.tensor is not None else torch.zeros_like(x)
        self.const = self.const + 1
        self.tensor = x.sin() + prev
        return x.cos() + self.tensor * self.const


program("replay_side_effects_model_attr", randn((4, 4)), calls=2)(_SideEffectsAttr)


def _closure_counter():
    """test_nested_closure_mutation: two closure tensors written in place on each call."""
    v1 = torch.randn(10)
    v2 = torch.randn(10)

    def fn3(x):
        nonlocal v1, v2
        v1 += 1
        v2 += 2
        return v1 + v2 + x

    return fn3


program("nested_closure_mutation", randn((10,)), calls=3, fresh=True)(_closure_counter)


def _out_of_scope_cell():
    """test_closure_out_of_scope_cell_with_mutation: a closure tensor written in place and returned."""
    cell2 = torch.rand(3, 3)

    def inner(t):
        nonlocal cell2
        x = cell2 + 1
        cell2 += 10
        x = x + cell2 + t
        return cell2, x

    return inner


program("closure_out_of_scope_cell_with_mutation", randn((3, 3)), calls=3, fresh=True)(_out_of_scope_cell)


def _rebinding_counter():
    """test_write_to_closures_in_inlining: a closure rebinding (not writing) its tensor."""
    x = torch.randn(10)

    def counter():
        nonlocal x
        x = x + 1
        return x

    return lambda t: counter() + counter() + t


program("write_to_closures_in_inlining", randn((10,)), calls=2, fresh=True)(_rebinding_counter)


# -- attributes on input tensors and objects mutated in place --------------------------------


def _with_attr(**attrs):
    def make():
        x = torch.randn(2, 2)
        for k, v in attrs.items():
            setattr(x, k, v() if callable(v) else v)
        return [x]

    return make


fn("tensor_property_on_tensor", _with_attr(y=lambda: torch.randn(2, 2)), fresh=True, no_grad_variant=True)(
    lambda x: x * x.y
)
fn("const_property_on_tensor", _with_attr(y=4), fresh=True, no_grad_variant=True)(lambda x: x * x.y)
fn("get_custom_tensor_attribute", _with_attr(custom_attr=3.14), fresh=True, no_grad_variant=True)(
    lambda x: x.custom_attr * x
)


@fn("tensor_property_assigned_on_tensor", randn((2, 2), (2, 2)))
def _property_assigned(x, y):
    x.y = y
    return x * x.y


@fn("const_property_assigned_on_tensor", args(lambda: torch.randn(2, 2), lambda: 4))
def _const_assigned(x, y):
    x.y = y
    return x * x.y


@fn("set_custom_tensor_attribute", randn((2, 2)))
def _set_custom_attr(x):
    x.custom_attr = 3.14
    return x.custom_attr * x


@fn("input_tensor_custom_attr_mutation", args(lambda: torch.ones(5), lambda: True))
def _input_custom_attr(x, flag):
    x.offloading_activation = flag
    return x + 1


@fn(
    "complex_attr_access_without_graph_breaks",
    args(lambda: [torch.randn(2, 2) for _ in range(3)], lambda: torch.randn(2, 2), lambda: 5),
)
def _complex_attr_access(x, y, z):
    for t in x:
        t.y = y
        t.z = y * z
    new_y = new_z = 1
    for t in x:
        new_y = t.y * new_y
        new_z = t.z * new_z
    return new_y, new_z


@fn("complex_attr_access_with_inline_reconstruct", randn((2, 2), (2, 2), (2, 2)))
def _inline_reconstruct(x, y, z):
    x.a, y.a, z.a = 1, 2, 3
    torch._dynamo.graph_break()
    mult = x.a + y.a + z.a
    return x * mult, y * mult


@dataclasses.dataclass
class _Fields:
    a: torch.Tensor
    b: torch.Tensor | None = None
    c: torch.Tensor | None = None
    e: torch.Tensor | None = None


# the objects' tensors are compared after the call (dynamo_repro_programs.check_subclass flattens inputs)
pytree.register_pytree_node(
    _Fields,
    lambda o: ([getattr(o, f.name) for f in dataclasses.fields(o)], None),
    lambda leaves, _: _Fields(*leaves),
)


@fn(
    "dataclass_fields",
    lambda: [_Fields(torch.randn(10), torch.randn(10), torch.randn(10))],
    dynamo_only=True,
    fresh=True,
)
def _dataclass_fields(obj):
    total = obj.a  # the input's own tensor: written in place below
    for field in dataclasses.fields(obj)[1:]:
        v = getattr(obj, field.name)
        if v is not None:
            total += v
    return total, obj.a


class _Obj:
    def __init__(self, a: torch.Tensor, b: torch.Tensor) -> None:
        self.a = a
        self.b = b


pytree.register_pytree_node(
    _Obj,
    lambda o: ([getattr(o, k) for k in ("a", "b", "c") if hasattr(o, k)], len(o.__dict__)),
    lambda leaves, n: _Obj(*leaves[:2]),
)


@fn("setattr_mutation1", lambda: [_Obj(torch.randn(10), torch.randn(10))], dynamo_only=True, fresh=True)
def _setattr_mutation1(obj):
    obj.c = obj.a * obj.b + 1
    obj.b = obj.a * obj.c + 2
    obj.a = obj.b * obj.c + 3
    return obj.a, obj.b, obj.c


@fn("tensor_is_contiguous", lambda: [torch.channels_last], dynamo_only=True)
def _tensor_is_contiguous(fmt):
    inp = torch.randn((1, 4, 1, 1))
    weight = torch.randn((2, 4, 3, 3)).to(memory_format=fmt)
    out = torch.conv2d(inp, weight, None, (2, 1), (1, 1), (1, 1), 1)
    return out, out.is_contiguous(memory_format=fmt)
