"""Programs from PyTorch's ``test/test_functionalization.py`` (names prefixed
``functionalization_``), more mutation through views in their spirit, dynamo's
``test_functions.py`` / ``test_repros.py`` programs (``functions_*``, ``repros_*``)
and ``regression_*`` reductions of bugs these programs found. Registered in
:data:`program_registry.PROGRAMS`; run by :mod:`torchinductor_programs`."""

from __future__ import annotations

import torch
from program_registry import PROGRAMS, args, program, randn

aten = torch.ops.aten

# -- test_functionalization.py ---------------------------------------------------------


@program("index_put3", args(lambda: torch.randn(6, 4, 2), lambda: torch.arange(3), lambda: torch.randn(6, 1, 2)))
def _index_put3(a, b, c):
    aten.index_put_(a, (None, b, None), c)
    a1 = a + 1
    aten.index_put_(a1, (None, b + 1, None), c + 1)
    return a, a1


@program("functionalization_multiple_views_of_same_base", randn((4,)))
def _f_multiple_views(x):
    y, z = x.view(-1), x.view(-1)
    x.add_(1)
    return z + 1, y + 1


@program("functionalization_simple", randn((4, 2)))
def _f_simple(x):
    y = x.view(4, 2)
    y.add_(torch.ones(4, 2))
    return y, x * x


@program("functionalization_simple_out", randn((4, 2)))
def _f_simple_out(x):
    z = torch.empty(())
    torch.add(x.view(4, 2), torch.ones(4, 2), out=z)
    return z * z, z


@program("functionalization_multi_out", randn((8,)))
def _f_multi_out(x):
    out_min, out_max = torch.empty(4), torch.empty(4)
    torch.aminmax(x.view(2, 4), dim=0, out=(out_max, out_min))
    return out_max, out_min


@program("functionalization_tensor_ctr", randn((3,)))
def _f_tensor_ctr(x):
    y = torch.tensor((1.0, 2.0, 3.0))
    y.view(-1).add_(x)
    return y


@program("functionalization_inplace_on_non_view", randn((4, 2)))
def _f_inplace_on_non_view(x):
    y = x.view(4, 2)
    x.add_(torch.ones(4, 2))
    return y


@program("functionalization_as_strided", randn((9,)))
def _f_as_strided(x):
    x.as_strided((2,), (2,), 1).add_(1)
    return x


@program("functionalization_diagonal", randn((2, 2)))
def _f_diagonal(x):
    x.diagonal().add_(torch.ones(2))
    return x * x


@program("functionalization_split", randn((4, 2)))
def _f_split(x):
    _, y2 = x.split(2)
    y3 = y2.diagonal()
    y3.add_(torch.ones(2))
    return y3, x * x


@program("functionalization_view_inplace", randn((4, 2)))
def _f_view_inplace(x):
    x.transpose_(1, 0)
    x[0].add_(torch.ones(4))
    return x


@program("functionalization_optional_tensor_list", randn((4, 2)))
def _f_optional_tensor_list(x):
    y = x.view(8)
    y.index_put_((torch.arange(4),), torch.arange(4, dtype=y.dtype), accumulate=False)
    return y


@program("functionalization_scalars", randn((4, 2)))
def _f_scalars(x):
    y = x.view(4, 2)
    y.add_(1)
    z = 2 * y
    z.div_(1)
    return z


@program("functionalization_metadata_change", randn((4, 2)))
def _f_metadata_change(x):
    return x.ge_(0)


@program("functionalization_everything", randn((4, 2)))
def _f_everything(x):
    z0 = (x + x).view(8).reshape(2, 4)
    z1 = z0.transpose(1, 0)
    z1.unsqueeze_(0)
    z1.squeeze_()
    z2, _ = z1.split(2)
    z2.add_(torch.ones(2, 2))
    return z2, z0[0] + z2.reshape(4)


@program("functionalization_copy_broadcast", randn((1,)))
def _f_copy(x):
    tmp = torch.zeros(2, 2)
    y = tmp.diagonal().copy_(x)
    return y.add_(x), tmp


@program("functionalization_fill_", randn((2, 2)))
def _f_fill(x):
    y = x + x
    y.diagonal().fill_(0)
    return y


@program("functionalization_resize_smaller", randn((8, 2)))
def _f_resize_smaller(w):
    y = (w + 1).view(4, 4)
    y.resize_(3, 3)
    y.view(-1).add_(1)
    return y + 1


@program("functionalization_nested_functions_propagate_updates", randn((2, 2)))
def _f_nested(x):
    x[0].add_(1)
    return x + x


# -- more mutation through views (in the spirit of the functionalization tests) ----------


@program("view_clone_view_inplace", randn((2, 3)))
def _view_clone_view_inplace(x):
    y = x.view(-1).clone()
    y.view(2, 3).add_(1)
    return y, x


@program("unbind_mutate", randn((3, 4)))
def _unbind_mutate(x):
    a, b, c = x.unbind(0)
    b.mul_(3)
    return a + c, x


@program("chunk_inplace", randn((6,)))
def _chunk_inplace(x):
    for i, p in enumerate(x.chunk(3)):
        p.mul_(i + 1)
    return x


@program("squeeze_unsqueeze_inplace_input", randn((1, 3, 1)))
def _squeeze_inplace(x):
    x.squeeze_(0)
    x.unsqueeze_(0)
    x.squeeze_(2)
    return x * 2, x


@program("as_strided_inplace_input", randn((4, 4)))
def _as_strided_(x):
    x.as_strided_((2, 2), (4, 1), 1)
    x.add_(1)
    return x


@program("unfold_mutate", randn((8,)))
def _unfold_mutate(x):
    y = x.clone()
    u = y.unfold(0, 2, 2)
    u[:, 0].zero_()
    return y, u


@program("view_of_view_mutated_twice", randn((2, 6)))
def _view_of_view(x):
    a = x.view(3, 4)
    a[1:].add_(1)
    x.view(12)[::3].mul_(2)
    return a


@program("real_view_of_complex_mutated", randn((3, 2)))
def _real_view_complex(x):
    c = torch.view_as_complex(x.clone())
    r = torch.view_as_real(c)
    r.add_(1)
    return c.abs(), r


@program("index_put_accumulate_through_t", randn((5, 3)))
def _index_put_t(x):
    x.t().index_put_((torch.tensor([0, 0, 2]),), torch.ones(3, 5), accumulate=True)
    return x


@program("inplace_on_two_views_of_input", randn((3, 3)))
def _two_views(x):
    y, z = x[0], x[:, 0]
    y.add_(1)
    return z, y


@program("out_variant_then_view", randn((4,)))
def _out_then_view(x):
    out = torch.empty(2, 2)
    torch.mul(x.view(2, 2), 2, out=out)
    return out.t(), out


@program("detach_view_mutation", randn((3,)))
def _detach_view_mutation(x):
    y = x * 2
    y.detach().add_(1)
    return y


@program("no_grad_inplace_intermediate", randn((3,)))
def _no_grad_inplace(x):
    y = x * 2
    with torch.no_grad():
        y.mul_(3)
    return y + x


# -- reductions of bugs found (strict xfails in test_torchinductor_programs.py) -----------


@program("regression_addcmul_inplace_value", randn((3, 4), (3, 4)))
def _addcmul_inplace_value(x, y):
    # dynamo rewrites addcmul_ / addcdiv_ with value= into prims.fma + copy_ (bug A)
    x.addcmul_(y, y, value=0.5)
    return x


@program("regression_addcdiv_inplace_value", randn((3, 4), (3, 4)))
def _addcdiv_inplace_value(x, y):
    x.addcdiv_(y, y.abs() + 1, value=2.0)
    return x


@program("regression_exact_stride", args(lambda: torch.as_strided(torch.randn(8, 8), (8, 4), (8, 1))))
def _exact_stride(x):
    # test_torchinductor.py's test_exact_stride: a gapped output buffer (bug C)
    r = torch.empty_strided(x.size(), x.stride())
    r[:] = x + x
    return r


# -- from test/dynamo/test_functions.py (strict xfails on the conveyor.compile entry) ---------


@program("functions_tensor_new_with_size", randn((10,)))
def _tensor_new_with_size(x):
    # test_tensor_new_with_size: Tensor.new(torch.Size) makes a tensor of that shape (bug E1)
    return x.new(torch.Size([2, 3])).fill_(2.0) + x.sum()


@program("functions_type_check", randn((10,)))
def _type_check(x):
    # test_fstrings3 reads x.__class__.__name__ (bug E2)
    return x + 1 if type(x) is torch.Tensor else x - 1


@program("functions_is_fx_tracing", randn((10,), (10,)))
def _is_fx_tracing(x, y):
    # test_is_fx_tracing (bug E3)
    return x - 1 if torch.fx._symbolic_trace.is_fx_tracing() else y + 1


# -- from test/dynamo/test_repros.py (strict xfails on the conveyor.compile entry) ----------


class _DeepcopiesSubmodule(torch.nn.Module):
    """test_maml_item_capture's PartialMaml fine-tunes ``deepcopy(self.net)`` in ``forward``."""

    def __init__(self) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.lin = torch.nn.Linear(3, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import copy

        return copy.deepcopy(self.lin)(x)


PROGRAMS["repros_deepcopy_submodule_in_forward"] = (_DeepcopiesSubmodule(), randn((2, 3)))


@program("repros_numpy_in_program", randn((3,)))
def _numpy_in_program(x):
    # test_indexing_with_list reads tensor.numpy() inside the program (bug F)
    return x * float(x.numpy().sum())
