"""Checkpointing programs that need ``ca_program_harness`` (a ``.backward()``,
hooks whose calls are logged, a backward inside the compiled function, several
calls of one compiled function), from PyTorch's
``test/dynamo/test_activation_checkpointing.py`` (commit
0069a4184a83906c61f844b32e90e3a87705344a): a tensor hook registered on a
checkpointed module's output (run upstream under compiled autograd), a
checkpointed function rebinding a closure variable, one compiled function called
at two shapes, submodules compiled inside an eager checkpoint, a checkpoint
inside a compiled function that runs ``autograd.grad`` or ``.backward()`` itself
(``RematerializeACNodesPassTests``), a compiled function called inside a
checkpoint. The reentrant programs of :mod:`checkpoint_catalogue` are here too
(``ckpt_<name>``: eager's reentrant checkpoint refuses ``autograd.grad``, the
checker's backward, so their gradients are compared after ``.backward()``). The
hook programs of ``test/dynamo/test_backward_higher_order_ops.py`` are in
:mod:`backward_hop_programs` (imported here).
"""

from __future__ import annotations

from typing import Any

import backward_hop_programs  # noqa: F401  (registers its programs)
import checkpoint_catalogue as cc
import checkpoint_catalogue2  # noqa: F401  (registers its programs)
import checkpoint_catalogue3  # noqa: F401
import torch
import torch.utils._pytree as pytree
from ca_program_harness import Tools, program
from torch import nn
from torch.utils.checkpoint import CheckpointPolicy, checkpoint, create_selective_checkpoint_contexts

AC = "test/dynamo/test_activation_checkpointing.py"


def _leaves_requiring_grad(values: list[Any]) -> tuple[list[Any], list[torch.Tensor]]:
    leaves: list[torch.Tensor] = []

    def make(v: Any) -> Any:
        if isinstance(v, torch.Tensor) and v.is_floating_point():
            leaves.append(v.detach().clone().requires_grad_(True))
            return leaves[-1]
        return v

    return pytree.tree_map(make, values), leaves


def _reentrant_body(name: str) -> Any:
    def body(t: Tools) -> Any:
        torch.manual_seed(0)
        p = cc.PROGRAMS[name]
        target, (values, leaves) = p.build(), _leaves_requiring_grad(p.make())
        params = list(target.parameters()) if isinstance(target, nn.Module) else []
        torch.manual_seed(1)
        out = t.compile(target)(*values)
        outs = [o for o in pytree.tree_leaves(out) if isinstance(o, torch.Tensor) and o.requires_grad]
        if outs:
            sum(o.sum() for o in outs).backward()
        return out, [v.grad for v in leaves], [q.grad for q in params]

    body.__name__ = f"p_ckpt_{name}"
    return body


for _name in sorted(cc.REENTRANT):
    program(AC)(_reentrant_body(_name))


class _Submod(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.matmul(x, x)
        return y * y


class _MustSave(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.submod = _Submod()
        self.norm = nn.LayerNorm(4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(checkpoint(self.submod, x, use_reentrant=False))


def _must_save(t: Tools, hooked: bool) -> Any:
    mod = _MustSave()
    if hooked:
        def on_grad(g: torch.Tensor) -> torch.Tensor:
            t.log("output hook", g)
            return g

        mod.submod.register_forward_hook(lambda m, a, out: (out.register_hook(on_grad), out)[1])
    x = torch.ones(4, 4, requires_grad=True)
    out = t.compile(mod)(x)
    out.sum().backward()
    return out, x.grad, [p.grad for p in mod.parameters()]


@program(AC)
def p_tags_must_save_tensor_without_backward_hook(t: Tools) -> Any:
    return _must_save(t, hooked=False)


@program(AC)
def p_tags_must_save_tensor_that_has_backward_hook(t: Tools) -> Any:
    return _must_save(t, hooked=True)


@program(AC)
def p_nonlocal_mutation(t: Tools) -> Any:
    counter = 0

    def gn(x: torch.Tensor) -> torch.Tensor:
        nonlocal counter
        counter += 1
        return torch.sin(x)

    def fn(x: torch.Tensor) -> torch.Tensor:
        return checkpoint(gn, x, use_reentrant=True)

    x = torch.randn(4, 4, requires_grad=True)
    t.compile(fn)(x).sum().backward()
    return x.grad, counter  # eager: 2 (the recomputation counts again)


@program(AC)
def p_symints_location_two_shapes(t: Tools) -> Any:
    def gn(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return torch.matmul(x, nn.functional.dropout(y, 0.5))

    f = t.compile(lambda x, y: checkpoint(gn, x, y, use_reentrant=True))
    out = []
    for n in (4, 5):
        x, y = torch.randn(n, n, requires_grad=True), torch.randn(n, n, requires_grad=True)
        r = f(x, y)
        r.sum().backward()
        out.append((r, x.grad, y.grad))
    return out


class _Block(nn.Module):
    def __init__(self, t: Tools) -> None:
        super().__init__()
        self.norm1, self.linear1 = nn.RMSNorm(8), nn.Linear(8, 8, bias=False)
        self.norm2, self.linear2 = nn.RMSNorm(8), nn.Linear(8, 8, bias=False)
        # each submodule compiled on its own (upstream: submod.compile()); the checkpoint is eager's
        self.calls = [t.compile(m) for m in (self.norm1, self.linear1, self.norm2, self.linear2)]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n1, l1, n2, l2 = self.calls
        x = x + l1(n1(x))
        return x + l2(n2(x))


@program(AC)
def p_attr_compile_submodules_in_checkpoint_wrapper(t: Tools) -> Any:
    block = _Block(t)
    x = torch.randn(4, 8, requires_grad=True)
    out = checkpoint(block, x, use_reentrant=False)
    out.sum().backward()
    return out, x.grad, [p.grad for p in block.parameters()]


def _grads_inside(t: Tools, f: Any, *shapes: tuple[int, ...]) -> Any:
    xs = [torch.randn(*s, requires_grad=True) for s in shapes]
    return t.compile(f)(*xs), [x.grad for x in xs]


@program(AC)
def p_ac_rematerialize_simple_forward_backward(t: Tools) -> Any:
    def f(x: torch.Tensor, y: torch.Tensor) -> Any:
        z = checkpoint(lambda a, b: torch.sigmoid(torch.matmul(a, b)), x, y, use_reentrant=False)
        dx, dy = torch.autograd.grad(z.sum(), (x, y))
        return dx.detach(), dy.detach()

    return _grads_inside(t, f, (4, 4), (4, 4))


@program(AC)
def p_ac_rematerialize_with_rng_ops(t: Tools) -> Any:
    def f(x: torch.Tensor) -> torch.Tensor:
        z = checkpoint(lambda a: torch.sigmoid(a + torch.rand_like(a)), x, use_reentrant=False)
        return torch.autograd.grad(z.sum(), x)[0]

    return _grads_inside(t, f, (4, 4))


@program(AC)
def p_ac_rematerialize_with_no_annotations(t: Tools) -> Any:
    def f(x: torch.Tensor) -> torch.Tensor:
        z = checkpoint(lambda a: torch.sigmoid(a + 4), x, use_reentrant=False)
        return torch.autograd.grad(z.sum(), x)[0]

    return _grads_inside(t, f, (4, 4))


def _addmm_saved() -> Any:
    def policy(ctx: Any, op: Any, *a: Any, **k: Any) -> CheckpointPolicy:
        if op == torch.ops.aten.addmm.default:
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    return create_selective_checkpoint_contexts(policy)


@program(AC)
def p_ac_rematerialize_with_selective_checkpoint_policy(t: Tools) -> Any:
    def f(x: torch.Tensor, w1: torch.Tensor, b1: torch.Tensor) -> Any:
        def body(inp: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
            return torch.relu(nn.functional.linear(inp, w, b))

        result = checkpoint(body, x, w1, b1, use_reentrant=False, context_fn=_addmm_saved)
        return torch.autograd.grad(result.sum(), (x, w1, b1))

    return _grads_inside(t, f, (4, 32), (32, 32), (32,))


@program(AC)
def p_joint_graph_passes_view_and_permute(t: Tools) -> Any:
    def f(x: torch.Tensor) -> Any:
        a = checkpoint(lambda v: torch.sigmoid(v.view(16).view(4, 4)), x, use_reentrant=False)
        b = checkpoint(lambda v: torch.sigmoid(v.permute(1, 0).permute(1, 0)), x, use_reentrant=False)
        return torch.autograd.grad(a.sum(), x)[0].detach(), torch.autograd.grad(b.sum(), x)[0].detach()

    return _grads_inside(t, f, (4, 4))


@program(AC)
def p_user_phase_annotation_with_extra_autograd_grad(t: Tools) -> Any:
    def f(x: torch.Tensor, w1: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        z1 = checkpoint(lambda a, b: torch.sin(a @ b), x, w1, use_reentrant=False)
        z2 = checkpoint(lambda a, b: torch.sigmoid(a @ b), x, w2, use_reentrant=False)
        return (torch.autograd.grad(z1.sum(), (x,))[0] + torch.autograd.grad(z2.sum(), (x,))[0]).detach()

    return _grads_inside(t, f, (4, 4), (4, 4), (4, 4))


class _GeluBlock(nn.Module):
    def __init__(self, dim: int = 16) -> None:
        super().__init__()
        self.l1 = nn.Linear(dim, dim, bias=False)
        self.l2 = nn.Linear(dim, dim, bias=False)

    def _fn(self, x: torch.Tensor) -> torch.Tensor:
        return self.l2(nn.functional.gelu(self.l1(x), approximate="tanh"))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return checkpoint(self._fn, x, use_reentrant=False)


class _ChunkedLoss(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block = _GeluBlock()
        self.head = nn.Linear(16, 16, bias=False)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        x = self.block(x)
        xd = x.detach().requires_grad_()
        total = 0
        for start in range(0, xd.shape[0], 4):
            chunk = nn.functional.mse_loss(self.head(xd[start : start + 4]), y[start : start + 4], reduction="sum")
            chunk = chunk / xd.shape[0]
            chunk.backward()
            total = total + chunk.detach()
        x.backward(xd.grad)
        return total


@program(AC)
def p_chunked_loss_remat(t: Tools) -> Any:
    model = _ChunkedLoss()
    total = t.compile(model)(torch.randn(12, 16), torch.randn(12, 16))
    return total, [p.grad for p in model.parameters()]


class _TwoBackwards(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.block1, self.block2 = _GeluBlock(), _GeluBlock()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.block1(x)
        z = self.block2(y)
        z.sum().backward(retain_graph=True)
        y.sum().backward()
        return z.detach()


@program(AC)
def p_two_backward_regions(t: Tools) -> Any:
    model = _TwoBackwards()
    x = torch.randn(8, 16, requires_grad=True)
    return t.compile(model)(x), x.grad, [p.grad for p in model.parameters()]


@program(AC)
def p_checkpoint_recompute_calls_compiled_function(t: Tools) -> Any:
    compiled_f = t.compile(lambda x: x.sin().cos())

    def fn(x: torch.Tensor) -> Any:
        y = checkpoint(compiled_f, x, use_reentrant=False).sum()
        (gx,) = torch.autograd.grad(y, (x,))
        return y.detach(), gx

    x = torch.randn(8, requires_grad=True)
    return fn(x), t.compile(fn)(x)


def _hooked_inside(t: Tools, a: torch.Tensor) -> torch.Tensor:
    y = a.sin()
    y.register_hook(lambda g: (t.log("inside", g), g * 2)[1])
    return y.cos()


@program(AC)
def p_hook_inside_checkpoint_non_reentrant(t: Tools) -> Any:
    # not upstream's: a tensor hook registered inside the checkpointed function
    x = torch.randn(4, requires_grad=True)
    out = t.compile(lambda v: checkpoint(_hooked_inside, t, v, use_reentrant=False))(x)
    out.sum().backward()
    return out, x.grad
