"""Inputs at a storage offset, where this torch's Inductor misplaces ``as_strided``.

Note [Storage offsets of Inductor's inputs]: ``as_strided(x, size, stride,
offset)`` addresses ``x``'s storage from its start. Inductor's generated
code reaches a graph input through its data pointer, which already includes
the input's own ``storage_offset()``; some torches' lowering of
``as_strided`` on an input (or a view of one) takes the explicit offset as
relative to that pointer, so it reads and writes ``storage_offset()``
elements too far, past the storage's end too (later torches subtract the
input's offset: ``GraphLowering.graph_input_storage_offsets``). conveyor's
graphs meet it where Inductor decomposes ``auto_functionalized`` (a mutating
custom op): the base is cloned with ``as_strided(base, (n,), (1,), 0)``, so a
custom op writing a view input at an offset (``x[1:2, 0]``) read its value
from the storage's start, or past its end (h_fuzz2's B19: silently wrong on
torch 2.11 and 2.12, with values from outside the tensor).

:func:`misplaces_input_offsets` probes the installed Inductor for it: it
lowers (no code generated, no compiler run) ``as_strided(x, (2,), (1,), 0)``
of a fake input at offset 3 and reads the offset of the view Inductor made
(``-3`` relative to the input's pointer where it is right, ``0`` where it
is not). On a torch that misplaces them, or whose lowering the probe cannot
read, a graph that takes such an ``as_strided`` (or a custom op Inductor
decomposes into one) of an input at a nonzero storage offset runs as it is,
op by op, with a warning (:func:`misplaced_input`); every other graph
compiles.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Sequence
from typing import Any

import torch
import torch.fx
from conveyor.stage_api import addresses_storage, view_root
from torch.utils._pytree import tree_leaves

log = logging.getLogger(__name__)

#: the higher-order ops Inductor decomposes into an ``as_strided`` of their bases
_CLONING_HOPS = ("auto_functionalized", "auto_functionalized_v2")


@functools.cache
def misplaces_input_offsets() -> bool:
    """Whether this torch's Inductor takes an explicit ``as_strided`` offset
    on an input as relative to the input's data pointer (Note [Storage
    offsets of Inductor's inputs]); ``True`` when the probe cannot tell."""
    try:
        return _probe_offset() != -3
    except Exception as exc:  # the internals the probe reads moved: assume the worst
        log.debug("inductor: cannot probe how as_strided offsets of inputs are lowered (%s)", exc)
        return True


def _probe_offset() -> Any:
    from torch._inductor.graph import GraphLowering
    from torch._inductor.virtualized import V
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx
    from torch.fx.experimental.symbolic_shapes import ShapeEnv

    def view(x: torch.Tensor) -> tuple[torch.Tensor]:
        return (torch.as_strided(x, (2,), (1,), 0),)

    mode = FakeTensorMode(shape_env=ShapeEnv())
    with mode:
        fake = torch.empty(4).as_strided((1,), (1,), 3)
        gm = make_fx(view)(fake)
    lowering = GraphLowering(gm, example_inputs=[fake], shape_env=mode.shape_env)
    with V.set_graph_handler(lowering), V.set_fake_mode(mode):
        lowering.run(fake)
    return lowering.graph_outputs[0].get_layout().offset


def misplaced_input(gm: torch.fx.GraphModule, inputs: Sequence[Any]) -> int | None:
    """The input of ``gm`` at a nonzero storage offset that one of its
    ``as_strided`` nodes or decomposed custom ops addresses, on a torch that
    misplaces it (Note [Storage offsets of Inductor's inputs]); ``None``
    when there is none."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    offset = {
        p: i
        for i, (p, t) in enumerate(zip(placeholders, inputs, strict=False))
        if isinstance(t, torch.Tensor) and t.layout is torch.strided and not _zero(t.storage_offset())
    }
    if not offset:
        return None
    for node in gm.graph.nodes:
        if node.op != "call_function":
            continue
        if addresses_storage(node) and node.args:
            reached = [node.args[0]]
        elif getattr(node.target, "__name__", None) in _CLONING_HOPS:
            reached = [a for a in tree_leaves((node.args, node.kwargs)) if isinstance(a, torch.fx.Node)]
        else:
            continue
        for arg in reached:
            root = view_root(arg)
            if root in offset and misplaces_input_offsets():
                return offset[root]
    return None


def _zero(offset: Any) -> bool:
    return isinstance(offset, int) and offset == 0
