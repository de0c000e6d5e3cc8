"""Programs from PyTorch's ``test/dynamo/test_repros.py`` (first part: the
``ReproTests`` up to the merge-criteria tests): out= into buffers, in-place on
inputs and on views, modules with buffers and plain tensor attributes, RNG,
data-dependent slicing, grad-mode regions. Registered in
:data:`dynamo_repro_programs.PROGRAMS`."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from dynamo_repro_programs import args, fn, program, randn
from torch import nn

# -- out=, in place on inputs and views ------------------------------------------------


@fn("out_overload_non_contiguous", args(lambda: torch.arange(4.0).reshape(2, 2), lambda: torch.arange(4.0).reshape(2, 2)))
def _out_overload_non_contiguous(x, y):
    return torch.abs(x, out=y.T)


@fn("index_select_contiguous", randn((6, 3, 6)))
def _index_select_contiguous(x):
    x = x.permute(1, 2, 0).unsqueeze(2)
    return torch.index_select(x, 0, torch.tensor([0]))


@fn("roll_as_strided_channels_last", args(lambda: torch.randn(2, 5, 2, 5).to(memory_format=torch.channels_last)))
def _roll_as_strided(x):
    x = torch.roll(x, shifts=-1, dims=0)
    return torch.as_strided(x, (5, 10), (4, 1), 0)


@fn("view_dtype_overload", args(lambda: torch.ones(4)))
def _view_dtype_overload(x):
    return x.view(torch.int32)


@fn("intermediate_leaf_requires_grad", randn((2, 2)))
def _intermediate_leaf(x):
    leaf = torch.ones(2, requires_grad=True)
    return leaf, leaf * 2 + x.sum()


@fn("embedding_backward_broadcasting_decomp", args(lambda: torch.ones(2, 4, 3), lambda: torch.ones(2, 4, dtype=torch.long)))
def _embedding_backward(grad_output, indices):
    return torch.ops.aten.embedding_dense_backward(grad_output, indices, 10, 1, True)


@fn("slicing_dynamic_shape", args(lambda: torch.ones(10, dtype=torch.long)))
def _slicing_dynamic_shape(y):
    x = torch.ones(8)
    return (x[y[0] :] + 3) * 5


@fn("slicing_dynamic_shape_setitem", args(lambda: torch.arange(10) % 7, lambda: torch.randn(10, 20)))
def _slicing_dynamic_shape_setitem(input_lengths, new_ones_1):
    new_ones_1[(3, slice(input_lengths[3], None, None))] = 0
    return (new_ones_1,)


@fn("rng_state", lambda: [])
def _rng_state():
    state = torch.get_rng_state()
    before = torch.rand(100)
    torch.set_rng_state(state)
    after = torch.rand(100)
    return before, after


@fn("copy_weird_strides", args(lambda: torch.randn(6, 255, 513)[:, :7, :7]))
def _copy_weird_strides(a):
    b = torch.zeros(6, 4, 8, 9)
    b[:, 0, 1:8, 1:8] = a
    d = b.view(2, 12, 8, 9).transpose(2, 1)
    d.add_(1)
    return d


@fn("setitem_boolean_mask_diff", args(lambda: torch.randn(4), lambda: torch.tensor([True, False, True, False]), lambda: torch.randn(2)))
def _setitem_boolean_mask(x, b, y):
    x = x.clone()
    x[b] = y
    return x


@fn("setitem_tuple_boolean_mask_diff", args(lambda: torch.randn(8, 4), lambda: torch.tensor([True, False, True, False]), lambda: torch.randn(8, 2)))
def _setitem_tuple_boolean_mask(x, b, y):
    x = x.clone()
    x[:, b] = y
    return x


@fn("torch_tensor_ops", randn((3,)))
def _torch_tensor_ops(x):
    return torch.Tensor.abs_(x)


@fn("bigbird_unsqueeze_inplace", randn((2, 3, 4, 4)))
def _bigbird_unsqueeze_inplace(reshape_2):
    view_2 = reshape_2.clone()
    view_2.unsqueeze_(2)
    cat_11 = torch.cat([view_2], dim=2)
    return (cat_11.view((2, 3, 4, -1)),)


@fn("issue1466_size_aot_autograd", randn((2, 3)))
def _issue1466(x):
    y = x * 2
    x_size = x.size()
    torch._dynamo.graph_break()
    return y.view(x_size) + 1


@fn("output_aliases_intermediate", randn((4,)))
def _output_aliases_intermediate(x):
    intermediate = x.mul(2)
    return intermediate.view(-1), intermediate


@fn("avoid_dupe_specialization", randn((4,)))
def _avoid_dupe(x):
    return (x + x) * 1


@fn("while_loop_graph_break_inside_call_function", randn((4,)))
def _while_loop_graph_break_inside(x):
    x += 2
    for _ in range(3):
        x += 1
        torch._dynamo.graph_break()
    x += 3
    return x


@fn("nested_while_loop_graph_break", randn((4,)))
def _nested_while_loop_graph_break(x):
    i = 20
    while i > 17:
        j = 3
        while j > 0:
            j -= 1
            x += 1
            torch._dynamo.graph_break()
        x = torch.sin(x)
        i -= 1
    return x


@fn("sort_out", lambda: [torch.randn(3, 5)[:, 0]])
def _sort_out(tensor):
    values1 = torch.tensor(0.0)
    indices1 = torch.tensor(0)
    torch.sort(tensor, out=(values1, indices1))
    return values1, indices1


@fn("relu_inplace_then_view", randn((4, 4)))
def _relu_inplace_then_view(x):
    y = x.t()
    F.relu(y, inplace=True)
    return y.reshape(-1)[:5], x


# -- modules with buffers, attributes and parameters ------------------------------------


class _SortOut(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.sorted = nn.Buffer(torch.ones(4, 4))
        self.indices = nn.Buffer(torch.ones(4, 4, dtype=torch.long))

    def forward(self, x):
        torch.sort(x, out=(self.sorted, self.indices))
        return (x + 1, self.sorted, self.indices)


program("sort_out2", randn((4, 4)))(_SortOut)


class _SigmoidOut(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.base = nn.Buffer(torch.ones(4, 4))

    def forward(self, x):
        torch.sigmoid(x, out=self.base)
        return x + self.base


program("sigmoid_out2", randn((4, 4)))(_SigmoidOut)


class _Ellipsis(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lnorm = nn.LayerNorm((16,), eps=1e-06)
        self.linear = nn.Linear(16, 16)

    def forward(self, cat_10):
        return (self.linear(self.lnorm(cat_10)[(slice(None), slice(0, 1), Ellipsis)]),)


program("ellipsis", randn((2, 7, 16)))(_Ellipsis)


class _Reinplacing(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.x_emb = nn.Embedding(64, 16)
        self.y_emb = nn.Embedding(64, 16)

    def forward(self, getitem_1, getitem_2, add):
        return (add + self.x_emb(getitem_1) + self.y_emb(getitem_2),)


program(
    "reinplacing",
    args(lambda: torch.randint(0, 64, (2, 8)), lambda: torch.randint(0, 64, (2, 8)), lambda: torch.randn(2, 8, 16)),
)(_Reinplacing)


class _ClassMember(nn.Module):
    a = 4
    b = torch.ones(3, 4)

    def __init__(self) -> None:
        super().__init__()
        self.c = 4

    def forward(self, x):
        return x.cos() + self.a + self.b + self.c


program("class_member", randn((3, 4)))(_ClassMember)


class _NamedBuffers(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.x = nn.Buffer(torch.ones(3))
        self.y = nn.Buffer(torch.ones(3))

    def forward(self, inp):
        res = 0
        for _, buffer in self.named_buffers():
            res += buffer.sum()
        return inp.cos() + res


program("named_buffers", randn((3, 4)))(_NamedBuffers)


class _Modules(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 3)

    def forward(self, inp):
        res = torch.zeros(3, 3)
        for _ in self.modules():
            res += self.fc(inp)
        return res


program("modules", randn((3, 4)))(_Modules)


class _SwinTensorAttr(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.t = torch.randn(3)  # not a parameter or buffer

    def forward(self, x):
        return x + torch.cat((self.t, self.t))


program("swin_base_tensor_attr", randn((6,)), calls=2)(_SwinTensorAttr)


class _BatchNormAct(nn.BatchNorm2d):
    def forward(self, x):
        return F.relu(super().forward(x))


program("batch_norm_act_train", randn((5, 1, 6, 6)), calls=2)(lambda: _BatchNormAct(1))
program("batch_norm_act_eval", randn((5, 1, 6, 6)))(lambda: _BatchNormAct(1).eval())


class _Counter(nn.Module):
    """A buffer counting the calls, an attribute mutated in forward."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.steps = nn.Buffer(torch.zeros((), dtype=torch.long))
        self.running = nn.Buffer(torch.zeros(4))

    def forward(self, x):
        self.steps += 1
        y = self.lin(x)
        with torch.no_grad():
            self.running.mul_(0.9).add_(y.mean(0), alpha=0.1)
        return y * self.steps.float(), self.running.clone()


program("buffer_mutation_across_calls", randn((3, 4)), calls=3)(_Counter)


class _AttrMutation(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.cache = None

    def forward(self, x):
        out = self.lin(x)
        if self.cache is not None:
            out = out + self.cache
        self.cache = out.detach()
        return out


program("module_attribute_tensor_cache", randn((2, 4)), calls=3)(_AttrMutation)


class _Dropout(nn.Module):
    def forward(self, x):
        return nn.Dropout(0.1)(x)


program("dropout_inline", randn((10,)))(_Dropout)


class _GELU(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.act = F.gelu

    def forward(self, x):
        return self.act(x)


program("hf_gelu_inline", randn((10,)))(_GELU)


class _SeqAppendList(nn.Sequential):
    def forward(self, x, ll):
        for layer in self:
            x = layer(x)
            ll.append(x)
        return x, ll


program("seq_append_list", args(lambda: torch.randn(4, 10), lambda: []))(
    lambda: _SeqAppendList(nn.Linear(10, 10), nn.ReLU(), nn.Linear(10, 10), nn.ReLU())
)


class _Interact(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.nets = nn.ModuleList([nn.Sequential(nn.Linear(6, 8), nn.GELU(), nn.Linear(8, 5)) for _ in range(3)])

    def forward(self, x, cycle: int):
        return self.nets[cycle](x)


program("issue114171", args(lambda: torch.rand(7, 6), lambda: 2))(_Interact)
