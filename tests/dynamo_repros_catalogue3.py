"""Programs from PyTorch's ``test/dynamo/test_repros.py`` (first part, continued):
grad-mode regions across graph breaks, context managers, backward inside the
program, Python structure around tensors (dicts mutated, user iterators, lists).
Registered in :data:`dynamo_repro_programs.PROGRAMS`."""

from __future__ import annotations

import contextlib

import torch
from dynamo_repro_programs import args, fn, randn

# -- grad mode, context managers, Python structure --------------------------------------


@fn("with_on_graph_break_inst", randn((3,)))
def _with_on_graph_break_inst(x):
    x = x.detach().requires_grad_(True)
    with torch.enable_grad():
        a = torch.sin(x)
        torch._dynamo.graph_break()
        c = torch.sigmoid(torch.sin(torch.cos(a)))
        c.sum().backward()
        return x.grad


@fn("grad_mode_carrying_correct_state_after_graph_break", randn((3,)))
def _grad_mode_after_graph_break(x):
    with torch.no_grad():
        y = x * 3
        torch._dynamo.graph_break()
        z = x + 2
    return y, z


@fn("locals_traced_correctly", randn((2, 3, 4)))
def _locals_traced(x):
    if x.dim() > 2:
        batch_size, seq_len, hidden_dim = x.shape
        x = x.view(-1, hidden_dim)
    x = x + 1
    if "batch_size" in locals() and "seq_len" in locals():
        x = x.view(batch_size, seq_len, -1)
    return x


@fn("nullcontext1", randn((10,)))
def _nullcontext1(x):
    x = x.sin()
    with contextlib.nullcontext():
        x = x.cos()
    return x.sin()


@fn("no_grad_inline", randn((10,)))
def _no_grad_inline(x):
    @torch.no_grad()
    def a(x):
        return x.sin()

    return a(x).cos()


@fn("gan_backward_twice_in_program", randn((2, 2), (2, 2)))
def _gan_repro(a, b):
    a = a.detach().requires_grad_(True)
    b = b.detach().requires_grad_(True)
    c = torch.ones(2, 2)
    e = torch.matmul(a, c)
    g_loss = torch.abs(e - torch.ones(2, 2)).mean()
    g_loss.backward()
    d_loss = torch.matmul(b, e.detach()).mean()
    d_loss.backward()
    return a.grad, b.grad


@fn("recursive_map", args(lambda: torch.randn(10), lambda: torch.randn(10), lambda: {"layer0": {"k": torch.randn(10)}}))
def _recursive_map(a, b, v):
    def _map(struct):
        for k, val in struct.items():
            if isinstance(val, dict):
                _map(val)
            else:
                struct[k] = val * 2

    x = a / (torch.abs(a) + 1)
    _map(v)
    return x * b, v["layer0"]["k"]


@fn("user_defined_iter", args(lambda: torch.zeros(1)))
def _user_defined_iter(x):
    class MyIter:
        def __init__(self) -> None:
            self.i = 0

        def __iter__(self):
            return self

        def __next__(self):
            if self.i < 3:
                self.i += 1
                return self.i
            raise StopIteration

    for i in MyIter():
        x += i
    return x


@fn("requires_grad_branch", randn((2,)))
def _requires_grad_branch(x):
    return x + 1 if x.requires_grad else x + 2


@fn("inplace_add_from_meta_factory", randn((2, 4)))
def _inplace_add_zeros(x):
    log_det = torch.zeros(x.size(0), device=x.device)
    log_det += x.sum(1)
    return log_det


@fn("tensor_data_kwarg", randn((1, 2)))
def _tensor_data_kwarg(x):
    return x * torch.tensor(data=[[1.0, -1.0]])


@fn("restricted_list_extend", randn((10,), (10,)))
def _list_extend(a, b):
    ll = [True]
    ll.append(a)
    ll.extend([b])
    ll.pop(0)
    ll.append(len(ll) * 10)
    return sum(ll)
