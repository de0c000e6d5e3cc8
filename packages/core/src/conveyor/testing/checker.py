"""The one eager-vs-compiled checker every stage's tests use.

``check(fn, *args, **kwargs)`` runs ``fn`` eagerly and compiled, each on its
own clone of the inputs (clones keep which inputs share storage, which is a
view of which, and leafness / requires_grad), and compares:

* outputs: structure, values, dtype, sizes (and strides unless told not to:
  the strides of dimensions longer than 1, Note [Significant strides]);
* aliasing: for every output, whether it *is* an input, and which inputs and
  which other outputs it shares storage with;
* inputs after the call: values, sizes, strides, storage offset, and which
  inputs share storage with which;
* gradients: of every leaf requiring grad that the inputs (and module
  parameters) come from, after a backward through a random weighting of the
  differentiable outputs (real and imaginary parts weighted apart). A
  gradient that is missing (``None``) on one side must be missing on the
  other: an optimizer skips a parameter without one and moves one with a
  zero gradient (weight decay, momentum); a backward that raises in eager
  must raise in the compiled program too.

If eager raises, the compiled program must raise an exception of the same
type (or a subclass); ``Checked`` then holds the two exceptions.

A mismatch raises ``AssertionError`` naming what differs and where.

Note [Significant strides]: an output's strides are compared on the
dimensions longer than 1, as PyTorch's own consistency tests compare meta,
fake and eager kernels (``torch._prims_common.check_significant_strides``).
The stride of a dimension of size 1 addresses no second element, so it
changes neither the values, nor which memory a tensor covers, nor
``is_contiguous``; and eager's CPU kernels choose it by how many operands
an op has (``x * 1`` of a ``(1, 2)`` tensor with strides ``(1, 1)`` keeps
``(1, 1)``, ``x - x`` and ``x.abs()`` give ``(2, 1)``), where the fake
kernels every compiler traces with give ``(2, 1)`` for all three. An input
after the call is compared exactly: it is the caller's own tensor, whose
strides only a metadata write changes, and the compiled program must replay
that write as eager does.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.utils._pytree as pytree


@dataclass(frozen=True)
class Checked:
    """What ``check`` compared (for tests that want more)."""

    eager_out: Any
    compiled_out: Any
    compiled: Any


def clone_inputs(leaves: Sequence[Any]) -> list[Any]:
    """Clone the tensors among ``leaves``, keeping storage sharing, views and
    leafness / requires_grad as they are among the originals."""
    storages: dict[int, torch.UntypedStorage] = {}
    roots: dict[int, torch.Tensor] = {}  # id(original root) -> clone
    out: list[Any] = []

    def materialize(t: torch.Tensor) -> torch.Tensor:
        key = t.untyped_storage()._cdata
        if key not in storages:
            storages[key] = t.untyped_storage().clone()
        with torch.no_grad():
            fresh = torch.empty(0, dtype=t.dtype, device=t.device)
            fresh.set_(storages[key], t.storage_offset(), t.size(), t.stride())
        return fresh

    def clone_root(r: torch.Tensor) -> torch.Tensor:
        if id(r) not in roots:
            c = materialize(r)
            if r.requires_grad:
                c.requires_grad_(True)
                if not r.is_leaf:  # a non-leaf input: give it a history, as eager's has
                    c = c * 1
            roots[id(r)] = c
        return roots[id(r)]

    for v in leaves:
        if not isinstance(v, torch.Tensor):
            out.append(v)
            continue
        if v.layout is not torch.strided:
            out.append(v.clone())
            continue
        if type(v) not in _PLAIN_TENSORS:  # a subclass (TwoTensor, DTensor, a __torch_function__ type): its own clone
            c = v.detach().clone().requires_grad_(v.requires_grad)
            out.append(c * 1 if v.requires_grad and not v.is_leaf else c)
            continue
        if v._base is None:
            out.append(clone_root(v))
            continue
        view = _in_dtype(clone_root(v._base), v.dtype).as_strided(v.size(), v.stride(), v.storage_offset())
        if v.is_leaf and v.requires_grad and not view.requires_grad:
            view.requires_grad_(True)
        out.append(view)
    return out


#: tensors cloned through their storage (a subclass's storage may be none of its data's)
_PLAIN_TENSORS = (torch.Tensor, torch.nn.Parameter, torch.nn.Buffer)


def _in_dtype(base: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``base`` seen as ``dtype`` (a view of it, with its history), for an
    input that views a base of another dtype (``view_as_real(c)``, ``c.real``,
    ``view_as_complex(f)``, ``f.view(torch.int32)``): its storage offset and
    strides count elements of its own dtype."""
    if base.dtype == dtype:
        return base
    if base.is_complex() and not dtype.is_complex and base.real.dtype == dtype:
        return torch.view_as_real(base)
    if dtype.is_complex and not base.is_complex() and base.dim() and base.size(-1) == 2 and base.stride(-1) == 1:
        return torch.view_as_complex(base)
    return base.view(dtype) if base.dim() else base.reshape(1).view(dtype)


def _shares(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.layout is torch.strided and b.layout is torch.strided and (
        a.untyped_storage()._cdata == b.untyped_storage()._cdata
    )


def _alias_facts(outs: Sequence[Any], ins: Sequence[Any]) -> list[tuple[Any, ...]]:
    facts: list[tuple[Any, ...]] = []
    for i, o in enumerate(outs):
        if not isinstance(o, torch.Tensor):
            facts.append(("not a tensor",))
            continue
        is_input = tuple(j for j, x in enumerate(ins) if x is o)
        views_input = tuple(j for j, x in enumerate(ins) if isinstance(x, torch.Tensor) and _shares(o, x))
        views_output = tuple(
            k for k, p in enumerate(outs) if k != i and isinstance(p, torch.Tensor) and _shares(o, p)
        )
        facts.append((is_input, views_input, views_output))
    return facts


def _input_sharing(ins: Sequence[Any]) -> list[tuple[int, ...]]:
    tensors = [x if isinstance(x, torch.Tensor) else None for x in ins]
    return [
        tuple(j for j, y in enumerate(tensors) if y is not None and x is not None and _shares(x, y))
        for x in tensors
    ]


def _compare_tensor(
    where: str,
    e: torch.Tensor,
    c: torch.Tensor,
    check_strides: bool,
    atol: float | None,
    rtol: float | None,
    significant: bool = False,
) -> None:
    assert type(c) is type(e) or isinstance(c, type(e)), f"{where}: type {type(c).__name__} != eager {type(e).__name__}"
    assert c.dtype == e.dtype, f"{where}: dtype {c.dtype} != eager {e.dtype}"
    assert c.shape == e.shape, f"{where}: shape {tuple(c.shape)} != eager {tuple(e.shape)}"
    if check_strides and e.layout is torch.strided and e.numel() > 1:
        if significant:  # Note [Significant strides]
            same = all(a == b for a, b, n in zip(c.stride(), e.stride(), e.shape, strict=True) if n > 1)
        else:
            same = c.stride() == e.stride()
        assert same, f"{where}: strides {c.stride()} != eager {e.stride()}"
    c, e = c.detach(), e.detach()
    if e.is_floating_point() and e.element_size() == 1 and (atol or rtol):
        # assert_close compares one-byte floats (float8) only bit for bit and refuses
        # a tolerance; their values are exact in float32, where the tolerance applies
        c, e = c.float(), e.float()
    torch.testing.assert_close(c, e, atol=atol, rtol=rtol, equal_nan=True, msg=lambda m: f"{where}: {m}")


def check(
    fn: Callable[..., Any],
    *args: Any,
    compile: Callable[[Callable[..., Any]], Callable[..., Any]] | None = None,
    check_strides: bool = True,
    check_grads: bool = True,
    atol: float | None = None,
    rtol: float | None = None,
    seed: int = 0,
    **kwargs: Any,
) -> Checked:
    """Run ``fn(*args, **kwargs)`` eagerly and compiled and compare everything.

    :param fn: a function or ``nn.Module`` (deep-copied for each side).
    :param compile: how to compile (default ``conveyor.compile`` with the
        configuration in force).
    :raises AssertionError: on any difference.
    """
    import conveyor

    compile = compile or conveyor.compile
    leaves, spec = pytree.tree_flatten((args, kwargs))
    eager_leaves = clone_inputs(leaves)
    comp_leaves = clone_inputs(leaves)
    if isinstance(fn, torch.nn.Module):
        eager_fn: Any = copy.deepcopy(fn)
        comp_module = copy.deepcopy(fn)
        compiled = compile(comp_module)
    else:
        eager_fn, comp_module, compiled = fn, None, compile(fn)

    extra_e = list(eager_fn.parameters()) if comp_module is not None else []
    extra_c = list(comp_module.parameters()) if comp_module is not None else []
    e_targets, c_targets = grad_leaves(eager_leaves + extra_e), grad_leaves(comp_leaves + extra_c)
    e_args, e_kwargs = pytree.tree_unflatten(eager_leaves, spec)
    c_args, c_kwargs = pytree.tree_unflatten(comp_leaves, spec)
    torch.manual_seed(seed)
    try:
        eager_out = eager_fn(*e_args, **e_kwargs)
    except Exception as eager_exc:
        try:
            compiled(*c_args, **c_kwargs)
        except Exception as comp_exc:
            assert isinstance(comp_exc, type(eager_exc)), (
                f"eager raised {type(eager_exc).__name__}: {eager_exc}; compiled raised "
                f"{type(comp_exc).__name__}: {comp_exc}"
            )
            return Checked(eager_exc, comp_exc, compiled)
        raise AssertionError(f"eager raised {type(eager_exc).__name__}: {eager_exc}; compiled did not") from None
    torch.manual_seed(seed)
    comp_out = compiled(*c_args, **c_kwargs)

    e_outs, e_spec = pytree.tree_flatten(eager_out)
    c_outs, c_spec = pytree.tree_flatten(comp_out)
    assert c_spec == e_spec, f"output structure {c_spec} != eager {e_spec}"
    for i, (e, c) in enumerate(zip(e_outs, c_outs, strict=False)):
        if isinstance(e, torch.Tensor):
            assert isinstance(c, torch.Tensor), f"output {i}: {type(c).__name__}, eager gave a tensor"
            _compare_tensor(f"output {i}", e, c, check_strides, atol, rtol, significant=True)
            assert c.requires_grad == e.requires_grad, (
                f"output {i}: requires_grad {c.requires_grad} != eager {e.requires_grad}"
            )
        else:
            assert c == e, f"output {i}: {c!r} != eager {e!r}"

    e_ins = list(eager_leaves)
    c_ins = list(comp_leaves)
    if comp_module is not None:
        e_ins += list(eager_fn.parameters()) + list(eager_fn.buffers())
        c_ins += list(comp_module.parameters()) + list(comp_module.buffers())
    e_alias, c_alias = _alias_facts(e_outs, e_ins), _alias_facts(c_outs, c_ins)
    for i, (ea, ca) in enumerate(zip(e_alias, c_alias, strict=False)):
        assert ca == ea, (
            f"output {i} aliasing (is input, shares storage with inputs, with outputs): {ca} != eager {ea}"
        )
    for j, (e, c) in enumerate(zip(e_ins, c_ins, strict=False)):
        if isinstance(e, torch.Tensor):
            _compare_tensor(f"input {j} after the call", e, c, True, atol, rtol)
            assert c.storage_offset() == e.storage_offset(), (
                f"input {j} after the call: storage offset {c.storage_offset()} != eager {e.storage_offset()}"
            )
    assert _input_sharing(c_ins) == _input_sharing(e_ins), (
        f"inputs sharing storage after the call: {_input_sharing(c_ins)} != eager {_input_sharing(e_ins)}"
    )

    if check_grads:
        _check_grads(e_outs, c_outs, e_targets, c_targets, atol, rtol, seed)
    return Checked(eager_out, comp_out, compiled)


def grad_leaves(ins: Sequence[Any]) -> list[torch.Tensor]:
    """The leaves requiring grad that ``ins`` are computed from, in input order.

    Taken before the call: a mutated non-leaf input gets a new history in
    place, and a gradient with respect to its new version says nothing about
    the program; the gradient with respect to the leaf it came from does
   ."""
    found: list[torch.Tensor] = []
    seen: set[int] = set()

    def add(t: torch.Tensor) -> None:
        if id(t) not in seen:
            seen.add(id(t))
            found.append(t)

    for x in ins:
        if not isinstance(x, torch.Tensor) or not x.requires_grad:
            continue
        if x.is_leaf:
            add(x)
            continue
        # visited nodes are kept alive: the Python object of an autograd node can be
        # made anew on each access, and a dead one's id reused by another node
        stack, visited, alive = [x.grad_fn], set(), []
        while stack:
            node = stack.pop()
            if node is None or id(node) in visited:
                continue
            visited.add(id(node))
            alive.append(node)
            variable = getattr(node, "variable", None)
            if isinstance(variable, torch.Tensor):
                add(variable)
            stack.extend(next_fn for next_fn, _ in reversed(node.next_functions))
    return found


def _loss(outs: list[torch.Tensor], weights: list[tuple[torch.Tensor, ...]]) -> torch.Tensor:
    total = torch.zeros((), dtype=torch.float64)
    for o, (w_re, w_im) in zip(outs, weights, strict=True):
        if o.is_complex():  # a real loss: weight the real and imaginary parts
            total = total + (o.real * w_re).sum().double() + (o.imag * w_im).sum().double()
        else:
            total = total + (o * w_re).sum().double()
    return total


def _check_grads(
    e_outs: list[Any],
    c_outs: list[Any],
    e_targets: list[torch.Tensor],
    c_targets: list[torch.Tensor],
    atol: float | None,
    rtol: float | None,
    seed: int,
) -> None:
    pairs = [
        (e, c)
        for e, c in zip(e_outs, c_outs, strict=False)
        if isinstance(e, torch.Tensor) and e.requires_grad and (e.is_floating_point() or e.is_complex())
    ]
    assert len(e_targets) == len(c_targets), (
        f"{len(c_targets)} leaves requiring grad behind the compiled inputs, eager has {len(e_targets)}"
    )
    if not pairs or not e_targets:
        return
    assert all(isinstance(c, torch.Tensor) and c.requires_grad for _, c in pairs), "outputs: requires_grad differs"
    gen = torch.Generator().manual_seed(seed + 1)
    weights = []
    for e, _ in pairs:
        real = e.real.dtype if e.is_complex() else e.dtype
        # drawn on the CPU (the generator's device, whatever the default device), then moved
        weights.append(
            tuple(
                torch.randn(e.shape, generator=gen, dtype=torch.float64, device="cpu").to(device=e.device, dtype=real)
                for _ in range(2)
            )
        )
    try:
        e_grads = torch.autograd.grad(_loss([e for e, _ in pairs], weights), e_targets, allow_unused=True)
    except RuntimeError as eager_exc:  # e.g. a saved tensor changed in place: compiled must fail as well
        try:
            torch.autograd.grad(_loss([c for _, c in pairs], weights), c_targets, allow_unused=True)
        except RuntimeError:
            return
        raise AssertionError(f"eager backward raised {type(eager_exc).__name__}: {eager_exc}; compiled did not") from None
    c_grads = torch.autograd.grad(_loss([c for _, c in pairs], weights), c_targets, allow_unused=True)
    for k, (eg, cg) in enumerate(zip(e_grads, c_grads, strict=True)):
        if eg is None or cg is None:  # an optimizer skips a None gradient and moves on a zero one
            assert eg is None and cg is None, (
                f"gradient {k}: {'compiled' if eg is None else 'eager'} has a gradient, the other none"
            )
            continue
        torch.testing.assert_close(cg, eg, atol=atol, rtol=rtol, equal_nan=True, msg=_prefix(f"gradient {k}"))


def _prefix(where: str) -> Callable[[str], str]:
    return lambda message: f"{where}: {message}"
