"""Programs from PyTorch's ``test/dynamo/test_repros.py`` (second part: from the
dynamic-shape, ``out=``, ``requires_grad``-setattr and HF repros on), and
programs in their spirit where the upstream test only counted frames: RNG in the
program, data-dependent shapes, module attributes mutated, inputs mutated
through views, closures. Registered in :data:`dynamo_repro_programs.PROGRAMS`."""

from __future__ import annotations

import dataclasses

import torch
import torch.nn.functional as F
from dynamo_repro_programs import args, fn, program, randn
from torch import nn

# -- test_repros.py (second part) ----------------------------------------------------------


@fn("maybe_multiply_symint", args(lambda: torch.arange(3.0), lambda: torch.arange(3.0), lambda: 5))
def _maybe_multiply_symint(t1, t2, d):
    return torch.add(t1, t2, alpha=d)


@fn("build_map_unpack_with_call", args(lambda: torch.ones(4)))
def _build_map_unpack(x):
    def inner(x, t, cond_scale, self_cond, other1, other2):
        return x.sin() + t + cond_scale + self_cond + other1 + other2

    return inner(x, 1, cond_scale=2, self_cond=3, **{**dict(other1=5), **dict(other2=4)})


@fn("dynamic_shapes_implicit_guard", randn((3, 1, 1, 1, 1)))
def _implicit_guard(x):
    y = x * x.size(x.shape[0])
    torch.sum(y, [y.shape[0]])
    return y


@fn("dynamic_shapes_float_guard", randn((3,)))
def _float_guard(x):
    return F.dropout(x, x.shape[0] / 6)


@fn("tensor_item_in_program", args(lambda: torch.zeros(6, 4), lambda: torch.tensor(2)))
def _tensor_item(x, y):
    return x.sum() + y.item()


@fn("dataclass_default_factory", args(lambda: torch.randn(4), lambda: [1, 2, 3]))
def _dataclass_default_factory(x, inp_list):
    @dataclasses.dataclass
    class DClass:
        sharding_contexts: list = dataclasses.field(default_factory=list)
        a: int = 1

    d = DClass(list(inp_list))
    d.sharding_contexts.append(x.sin() + d.a)
    return d.sharding_contexts


@fn("iadd_tuple", randn((4,)))
def _iadd_tuple(x):
    a = ()
    a += (torch.sin(x),)
    return a


@fn("hf_bigbird_unsqueeze", randn((1, 8, 6), (1, 6, 8), (1, 8, 6), (1, 6, 8), (1, 8, 1, 8)))
def _hf_bigbird_unsqueeze(inp1, inp2, inp3, inp4, c):
    a = torch.bmm(inp1, inp2)
    torch._dynamo.graph_break()
    a.unsqueeze_(2)
    a = a * 2
    b = torch.bmm(inp3, inp4)
    b.unsqueeze_(2)
    return torch.cat([a, b, c], dim=2), a + b


@fn("kwargs_out_list_variable", args(lambda: torch.tensor([[0.0, 1, 2, 4]])))
def _frexp_out(x):
    out = [torch.empty(0), torch.empty(0, dtype=torch.int32)]
    return torch.frexp(input=x, out=out)


@fn("split_with_sizes_tolist", args(lambda: torch.randn(32), lambda: torch.tensor((7, 16, 9))))
def _split_with_sizes(result, split_sizes):
    return torch.ops.aten.split_with_sizes(result, split_sizes.tolist())


@fn("add_sub_alpha_out", args(lambda: torch.randn(2, 3, 4), lambda: torch.zeros(2, 3, 4)))
def _add_alpha_out(inp, out):
    torch.add(inp, 1, alpha=2, out=out)
    return torch.sub(out, inp, alpha=0.4, out=out.view(4, 6))


@fn("addr_alpha_beta_out", randn((2, 3), (2,), (3,), (2, 3)))
def _addr_out(inp, v1, v2, out):
    return torch.addr(inp, v1, v2, alpha=2, beta=5, out=out)


@fn("negative_shape_guard", args(lambda: torch.ones(5, 1, 3, 4)))
def _negative_shape_guard(x):
    return x.cos() if x.size() != (5, 1, 2, 3) else x.sin()


@fn("setattr_requires_grad_graph_breaks", args(lambda: torch.zeros(5)))
def _setattr_requires_grad(x):
    z = x + 4
    x.requires_grad = True
    return x * z


@fn("many_views_with_mutation", args(lambda: [torch.rand(16 * 5).as_strided((4, 4), (4, 1), 3 + 16 * i) for i in range(4)]))
def _many_views_with_mutation(x):
    x[0].relu_()
    return torch.cat(x).sum()


@fn("subclass_graph_output_repro_plain", args(lambda: torch.ones(2)))
def _graph_output(x):
    return x.clone().view(-1)


@fn("binary_cross_entropy_kwargs", args(lambda: torch.rand(2, 9), lambda: torch.rand(2, 9)))
def _bce(inp, target):
    return F.binary_cross_entropy(input=inp, target=target, reduction="mean")


@fn("randint_out", args(lambda: torch.empty(10, dtype=torch.int64)))
def _randint_out(out):
    return torch.randint(17, (10,), out=out)


# -- RNG, data-dependent shapes ----------------------------------------------------------------


@fn("rng_rand_like_and_dropout", randn((8, 8)))
def _rng(x):
    return torch.rand_like(x) + F.dropout(x, 0.5), torch.randn(3)


@fn("rng_manual_seed_inside", randn((4,)))
def _rng_seed_inside(x):
    torch.manual_seed(7)
    return x + torch.rand(4)


@fn("rng_generator_state_twice", randn((4,)), calls=2)
def _rng_twice(x):
    return x * torch.rand(4)


@fn("nonzero_data_dependent", randn((6,)))
def _nonzero(x):
    idx = torch.nonzero(x > 0).flatten()
    return x[idx] * 2, idx


@fn("boolean_mask_select", randn((4, 5)))
def _mask_select(x):
    return x[x > 0].sum(), torch.masked_select(x, x < 0)


@fn("unique_consecutive", args(lambda: torch.tensor([1, 1, 2, 2, 3, 1, 1, 2])))
def _unique(x):
    return torch.unique_consecutive(x, return_counts=True)


@fn("repeat_interleave_tensor", args(lambda: torch.randn(3, 2), lambda: torch.tensor([1, 2, 3])))
def _repeat_interleave(x, r):
    return torch.repeat_interleave(x, r, dim=0) + 1


# -- in place on inputs, through views, closures -------------------------------------------------


@fn("inplace_on_input_view_chain", randn((4, 6)))
def _inplace_chain(x):
    v = x.view(2, 12)[:, 3:9].unflatten(1, (2, 3))
    v.mul_(2)
    x.t()[0].add_(1)
    return v.sum(), x


@fn("inplace_on_two_aliased_inputs", lambda: (lambda b: [b, b[1:]])(torch.randn(5)))
def _aliased_inputs(a, b):
    a.add_(1)
    b.mul_(2)
    return a + b[0]


@fn("closure_over_tensor_mutated", randn((3,)))
def _closure_mutated(x):
    acc = torch.zeros(3)

    def step(v):
        acc.add_(v)
        return acc * 2

    step(x)
    return step(x.sin()), acc


@fn("setitem_on_input", randn((4, 4), (4,)))
def _setitem_input(x, y):
    x[1] = y
    x[:, 2] = 0
    return x.sum(0)


@fn("detach_then_inplace_input", randn((4,)))
def _detach_inplace(x):
    x.detach().add_(1)
    return x * 2


@fn("no_grad_inplace_on_input", randn((4,)))
def _no_grad_inplace(x):
    y = x * 3
    with torch.no_grad():
        x.mul_(2)
    return y, x


# -- modules: attributes mutated, buffers, parameters ----------------------------------------------


class _Training(nn.Module):
    """Toggles its own training flag and counts calls in a Python int."""

    def __init__(self) -> None:
        super().__init__()
        self.bn = nn.BatchNorm1d(4)
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        self.bn.train(self.calls % 2 == 1)
        return self.bn(x) * self.calls


program("module_flips_training_mode", randn((6, 4)), calls=3)(_Training)


class _ParamDataSet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(3, 3)

    def forward(self, x):
        out = self.lin(x)
        with torch.no_grad():
            self.lin.weight.mul_(0.5)
        return out


program("module_param_inplace_no_grad", randn((2, 3)), calls=2)(_ParamDataSet)


class _LSTM(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(4, 5, batch_first=True)

    def forward(self, x):
        out, (h, c) = self.lstm(x)
        return out.sum(1), h


program("lstm", randn((2, 3, 4)))(_LSTM)


class _Embedding(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.emb = nn.Embedding(10, 4, padding_idx=0, max_norm=1.0)

    def forward(self, idx):
        return self.emb(idx).sum()


program("embedding_max_norm_renorms_weight", args(lambda: torch.tensor([[1, 2, 0], [3, 3, 9]])), calls=2)(_Embedding)


class _RunningStats(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.register_buffer("mean", torch.zeros(4))
        self.register_buffer("n", torch.tensor(0.0))

    def forward(self, x):
        self.n.add_(1)
        self.mean.add_((x.mean(0) - self.mean) / self.n.clone())
        return x - self.mean


program("buffer_running_mean", randn((5, 4)), calls=3)(_RunningStats)


class _BufferSaved(nn.Module):
    """Multiplies by a buffer it then increments: a later call's increment
    changes the value eager saved for the backward (eager's backward raises)."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.scale = nn.Buffer(torch.ones(()))

    def forward(self, x):
        y = self.lin(x) * self.scale
        with torch.no_grad():
            self.scale += 1
        return y


program("buffer_saved_then_mutated", randn((3, 4)), calls=2)(_BufferSaved)


class _Seq(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Conv2d(2, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(), nn.AdaptiveAvgPool2d(1))
        self.head = nn.Linear(4, 3)

    def forward(self, x):
        return F.log_softmax(self.head(self.net(x).flatten(1)), -1)


program("conv_bn_head_train", randn((2, 2, 6, 6)), calls=2)(_Seq)
