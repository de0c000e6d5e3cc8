"""Writes through an input that overlaps itself run eagerly, with a warning.

Note [Writes through a self-overlapping input]: an input whose elements
share memory (``base.as_strided((2,), (0,), 0)``, ``expand``, strides like
``(1, 1)``) is one tensor to functionalization, with each element its own
value. A write through it, or through a view of it, is then wrong twice:
later reads of the other elements that share the written memory do not see
the write (eager's do), and the new value has several different values for
one memory location, which no write-back can store (``copy_`` into such a
tensor raises "more than one element of the written-to tensor refers to a
single memory location"). Eager's own result there depends on the op: some
refuse such a tensor (``add_``, ``copy_``), some write each element in
turn (``add_`` with strides ``(1, 1)`` adds twice to the shared element),
some write one element of it (``x[0].zero_()``). Only eager knows, so the
specialization runs the captured aten graph on the caller's tensors, with
a warning (``stage_api.warn_eager``); a program that only reads
such an input compiles as usual.

Note [Writes through a self-overlapping view]: the same holds for a view the
program takes whose elements share memory (``base.as_strided((2, 3), (1,
0))``, ``t.unfold(0, 3, 2)``, ``t.expand(5, 5)``) and writes through, though
the input it views does not overlap itself: ``v[1, 1] = 5`` writes one
memory location in eager, where functionalization gives the view one value
per element and scatters them all back into the base (``as_strided_scatter``),
so a later element that shares the location puts the old value back: the
write was silently lost (test_view_ops.py's ``test_flatten_view``, on a
stride-0 ``as_strided``). torch's functionalization refuses some of these
(``unfold``: "a tensor being mutated that has internal overlap") and not
others. A write whose chain of views passes through a self-overlapping
tensor runs the captured aten graph eagerly, with a warning, as for such an
input.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
import torch.fx
from conveyor import Lowering, Request, stage_api
from conveyor.stage_api import is_view, overlaps_itself, written_positions

VIEW_REASON = (
    "it writes through a view whose elements share memory, which functionalization cannot express "
    "(Note [Writes through a self-overlapping view])"
)


def written_self_overlapping(inputs: Sequence[Any], written: Sequence[bool]) -> list[int]:
    """The inputs whose data the program writes and that overlap themselves."""
    return [i for i, (t, w) in enumerate(zip(inputs, written)) if w and overlaps_itself(t)]


def writes_through_self_overlapping_view(graph: torch.fx.GraphModule) -> bool:
    """Whether an op of ``graph`` writes through a chain of views (the written
    tensor included) on which a view's elements share memory (Note [Writes
    through a self-overlapping view]); the inputs themselves are
    :func:`written_self_overlapping`'s."""
    for node in graph.graph.nodes:
        if node.op != "call_function":
            continue
        for pos, name in written_positions(node):
            arg = node.args[pos] if pos < len(node.args) else node.kwargs.get(name)
            while isinstance(arg, torch.fx.Node) and arg.op == "call_function" and is_view(arg) and arg.args:
                if overlaps_itself(arg.meta.get("val")):
                    return True
                arg = arg.args[0]
    return False


def eager_lowering(request: Request, stage: str, inputs: Sequence[int], reason: str = "") -> Lowering:
    """``stage_api.eager_lowering`` with a warning naming the inputs
    and ``reason`` (default: Note [Writes through a self-overlapping
    input])."""
    if not reason:
        reason = (
            f"it writes through input(s) {list(inputs)}, whose elements share memory: functionalization cannot "
            "express such a write (Note [Writes through a self-overlapping input])"
        )
    elif inputs:
        reason = f"input(s) {list(inputs)}: {reason}"
    return stage_api.eager_lowering(request, stage, reason)


# Note [Sparse compressed inputs that require grad]: torch 2.13's functional
# wrapper of a sparse compressed tensor (CSR, CSC, BSR, BSC) that requires
# grad aborts the process: building its autograd metadata asks the wrapper for
# its layout, which ``FunctionalTensorWrapper`` does not implement (an
# uncaught ``c10::Error`` "layout_impl is only implemented for TensorImpl
# subclasses"). The same holds for such a tensor made inside the program
# (``x.to_sparse_csr()`` of an ``x`` that requires grad). Such a
# specialization runs the captured aten graph eagerly, with a warning; without
# grad, and for sparse COO tensors, it compiles.
_COMPRESSED = (torch.sparse_csr, torch.sparse_csc, torch.sparse_bsr, torch.sparse_bsc)
SPARSE_COMPRESSED_REASON = (
    "sparse compressed (CSR/CSC/BSR/BSC) tensors that require grad cannot be functionalized in torch 2.13 "
    "(Note [Sparse compressed inputs that require grad])"
)


def sparse_compressed_with_grad(inputs: Sequence[Any]) -> list[int]:
    """The inputs with a sparse compressed layout that require grad."""
    return [
        i
        for i, t in enumerate(inputs)
        if isinstance(t, torch.Tensor) and t.layout in _COMPRESSED and t.requires_grad
    ]


_COMPRESSED_NAMES = ("csr", "csc", "bsr", "bsc", "sparse_compressed")


def makes_sparse_compressed(graph: torch.fx.GraphModule) -> torch.fx.Node | None:
    """The first node of ``graph`` that may make a sparse compressed tensor
    (an op named for one, or ``to_sparse`` with a compressed ``layout``)."""
    for node in graph.graph.nodes:
        if node.op != "call_function" or not isinstance(node.target, torch._ops.OpOverload):
            continue
        name = node.target._schema.name.split("::")[-1]
        if any(part in name for part in _COMPRESSED_NAMES):
            return node
        if "to_sparse" in name and any(a in _COMPRESSED for a in (*node.args, *node.kwargs.values())):
            return node
    return None
