"""What an FX node's op schema says about writes: the one answer every stage uses."""

from __future__ import annotations

from typing import Any

import torch.fx


def written_args(node: torch.fx.Node) -> list[Any]:
    """The arguments ``node``'s op writes to (in-place, ``out=``, any schema
    argument marked ``(a!)``), as the node passes them."""
    schema = getattr(node.target, "_schema", None)
    if schema is None:
        return []
    return [
        node.args[j] if j < len(node.args) else node.kwargs.get(arg.name)
        for j, arg in enumerate(schema.arguments)
        if arg.alias_info is not None and arg.alias_info.is_write
    ]


def writes(node: torch.fx.Node) -> bool:
    """``node``'s op writes to one of its arguments."""
    schema = getattr(node.target, "_schema", None)
    return schema is not None and any(a.alias_info is not None and a.alias_info.is_write for a in schema.arguments)
