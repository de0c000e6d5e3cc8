"""Factory calls a program made under a default dtype it set: their traced
dtype written into the graph."""

from __future__ import annotations

import torch


# Note [Factory calls under a default dtype the program set]: ``torch.ones(2)``
# traces to ``aten.ones([2])`` with no dtype: its kernel reads the default dtype
# when the graph runs. A program that sets the default dtype and puts it back
# (``torch.set_default_dtype(torch.float64); a = torch.ones(2);
# torch.set_default_dtype(torch.float32)``, or a context manager that does so)
# made ``a`` float64 in eager and in the trace, but the graph runs with the
# caller's default and made it float32 (aot_eager does the same; dynamo's own
# ``backend="eager"`` runs the Python and is right). A factory node (no tensor
# argument, a ``dtype`` argument left out) whose traced dtype is not what the
# caller's default dtype gives gets its traced dtype written into the node. The
# caller's default dtype is part of every cache key, so a node left as it was
# still makes the dtype it was traced with.
def pin_factory_dtypes(graph: torch.fx.GraphModule, default: torch.dtype) -> None:
    """Write the traced dtype into factory nodes of ``graph`` (and its subgraphs)
    made under another default dtype than ``default``, the caller's."""
    defaults = {default, _COMPLEX_OF.get(default)}
    for gm in graph.modules():
        if not isinstance(gm, torch.fx.GraphModule):
            continue
        changed = False
        for node in gm.graph.nodes:
            val = node.meta.get("val")
            if (
                node.op == "call_function"
                and isinstance(node.target, torch._ops.OpOverload)
                and isinstance(val, torch.Tensor)
                and (val.is_floating_point() or val.is_complex())
                and val.dtype not in defaults
                and _leaves_dtype_to_default(node)
            ):
                node.update_kwarg("dtype", val.dtype)
                changed = True
        if changed:
            gm.recompile()


_COMPLEX_OF = {torch.float16: torch.complex32, torch.float32: torch.complex64, torch.float64: torch.complex128}


def _leaves_dtype_to_default(node: torch.fx.Node) -> bool:
    """A factory op (no tensor argument) with a ``dtype`` argument the call left out or gave None."""
    schema = node.target._schema  # type: ignore[union-attr]
    names = [a.name for a in schema.arguments]
    if "dtype" not in names or any(isinstance(a.type, torch.TensorType) for a in schema.arguments):
        return False
    i = names.index("dtype")
    given = node.kwargs["dtype"] if "dtype" in node.kwargs else (node.args[i] if i < len(node.args) else None)
    return given is None
