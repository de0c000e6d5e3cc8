"""What an op is, from its schema and tags: the one place every stage asks.

Views, writes (with their alias sets and ``out=``), storage swaps, random and
effectful ops, and what may be recomputed are answered here, per op overload
(cached) and per FX node; the schema text is read by ``conveyor.analysis.ops_aliasing``.

Two answers to "does this op write" exist, on purpose:

* ``writes`` / ``written_args``: the writes the schema *declares* on a tensor's
  memory (``Tensor(a!)``, ``Tensor(a!)[]``, ``out=``). This is what stages that
  run ops under torch's functionalization or autograd need: an undeclared write
  (``native_batch_norm``'s running statistics) is replaced there by torch itself,
  and a list written as a list (``aten.add_.t``, ``aten.sort.Tensor``: ``t[](a!)``,
  ``Tensor[](a!)``) changes no tensor memory.
* ``OpFacts.writes_memory``: the declared writes plus the ``UNDECLARED_WRITES``;
  what an analysis of the graph as written (``conveyor_alias_db``) needs to order
  reads and writes soundly.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import torch
import torch.fx
from torch._higher_order_ops.effects import has_effects

from conveyor.analysis.ops_aliasing import (
    STORAGE_ADDRESSING_OPS,
    STORAGE_SWAPPING_OPS,
    UNDECLARED_WRITES,
    ArgAlias,
    OpAliasing,
    ReturnAlias,
    op_aliasing,
)

__all__ = [
    "MUST_RUN_OPS",
    "STORAGE_ADDRESSING_OPS",
    "STORAGE_SWAPPING_OPS",
    "UNDECLARED_WRITES",
    "ArgAlias",
    "OpAliasing",
    "OpFacts",
    "ReturnAlias",
    "addresses_storage",
    "is_effectful",
    "is_random",
    "is_view",
    "must_keep",
    "op_aliasing",
    "op_facts",
    "swaps_storage",
    "view_root",
    "writes",
    "written_args",
    "written_positions",
]


#: Note [Ops that must run]: ops whose only purpose is to raise (error checks,
#: asserts) return nothing a program uses, so a pass that drops unused nodes
#: would drop them and a compiled program would no longer raise where eager
#: does. torch's own effects table (``has_effects``) marks some of them, and
#: which ones depends on the torch (``_linalg_check_errors`` from 2.13 on), so
#: conveyor keeps this one list and joins it with torch's table in
#: ``OpFacts.effectful``: the one answer every pass asks.
MUST_RUN_OPS = frozenset(
    {
        "aten::_linalg_check_errors",
        "aten::_assert_async",
        "aten::_assert_scalar",
        "aten::_assert_tensor_metadata",
        "aten::sym_constrain_range",
        "aten::sym_constrain_range_for_size",
    }
)


@dataclass(frozen=True)
class OpFacts:
    """What an op overload is.

    :ivar aliasing: the schema's alias annotations, per argument and return.
    :ivar written: ``(position, name)`` of each argument whose tensor memory the
        schema declares written (in-place ``self``, ``out=``, any ``(a!)``).
    :ivar writes_memory: some argument's memory is written, declared or not
        (``UNDECLARED_WRITES``).
    :ivar view: some return aliases an argument and nothing is written.
    :ivar storage_swap: the op may make a tensor use another's storage, which its
        schema does not declare (``STORAGE_SWAPPING_OPS``).
    :ivar random: the op draws from the random number generator.
    :ivar addresses_storage: the op reaches its argument's storage by an absolute
        offset (``STORAGE_ADDRESSING_OPS``).
    """

    aliasing: OpAliasing
    written: tuple[tuple[int, str], ...]
    writes_memory: bool
    view: bool
    storage_swap: bool
    random: bool
    addresses_storage: bool
    op: torch._ops.OpOverload

    @property
    def effectful(self) -> bool:
        """The op must run even when nothing uses its result: it is one of
        ``MUST_RUN_OPS``, or torch marks it as having side effects (asked each
        time: ops are registered as effectful at run time)."""
        return self.op._schema.name in MUST_RUN_OPS or has_effects(self.op)

    @property
    def writes(self) -> bool:
        """The schema declares a write to some argument's tensor memory."""
        return bool(self.written)

    @property
    def recomputable(self) -> bool:
        """Running the op again on the same inputs gives the same values and
        changes nothing else: no write, no storage swap, no randomness, no effect.
        (Whether recomputing is *worth it* is the partitioner's policy.)"""
        return not (self.writes_memory or self.storage_swap or self.random or self.effectful)


@functools.cache
def op_facts(op: torch._ops.OpOverload) -> OpFacts:
    """The facts of ``op`` (cached per overload)."""
    aliasing = op_aliasing(op)
    written = tuple((i, a.name) for i, a in enumerate(aliasing.args) if a.is_write and a.declared)
    view = not written and any(r.holds_tensors and r.alias_sets for r in aliasing.returns)
    return OpFacts(
        aliasing=aliasing,
        written=written,
        writes_memory=any(a.is_write for a in aliasing.args),
        view=view,
        storage_swap=op._schema.name in STORAGE_SWAPPING_OPS,
        random=aliasing.random,
        addresses_storage=op._schema.name in STORAGE_ADDRESSING_OPS,
        op=op,
    )


def _facts(node: torch.fx.Node) -> OpFacts | None:
    target = node.target
    return op_facts(target) if isinstance(target, torch._ops.OpOverload) else None


def written_positions(node: torch.fx.Node) -> tuple[tuple[int, str], ...]:
    """``(position, name)`` of each argument ``node``'s op declares it writes."""
    facts = _facts(node)
    return facts.written if facts is not None else ()


def written_args(node: torch.fx.Node) -> list[Any]:
    """The arguments ``node``'s op writes to (in-place, ``out=``, any schema
    argument marked ``(a!)``), as the node passes them."""
    return [node.args[j] if j < len(node.args) else node.kwargs.get(name) for j, name in written_positions(node)]


def writes(node: torch.fx.Node) -> bool:
    """``node``'s op declares a write to one of its tensor arguments."""
    return bool(written_positions(node))


def is_view(node: torch.fx.Node) -> bool:
    """``node``'s op returns an alias of an argument without writing to it."""
    facts = _facts(node)
    return facts is not None and facts.view


def addresses_storage(node: torch.fx.Node) -> bool:
    """``node``'s op reaches its argument's storage by an absolute offset
    (``as_strided``, ``as_strided_``, ``as_strided_scatter``, ``resize_``...)."""
    facts = _facts(node)
    return facts is not None and facts.addresses_storage


def view_root(node: Any) -> Any:
    """The value ``node`` is a view of, past its whole chain of view ops (the
    node itself when it is no view; an argument that is no node, unchanged)."""
    while isinstance(node, torch.fx.Node) and node.op == "call_function" and is_view(node) and node.args:
        node = node.args[0]
    return node


def swaps_storage(node: torch.fx.Node) -> bool:
    """``node``'s op may rebind a tensor to another storage (``set_``, ``set_data``)."""
    facts = _facts(node)
    return facts is not None and facts.storage_swap


def is_random(node: torch.fx.Node) -> bool:
    """``node``'s op draws from the random number generator."""
    facts = _facts(node)
    return facts is not None and facts.random


def is_effectful(node: torch.fx.Node) -> bool:
    """``node``'s op must run even though nothing uses it (``aten._linalg_check_errors``
    raises on a singular matrix; Note [Ops that must run])."""
    facts = _facts(node)
    return facts is not None and facts.effectful


def must_keep(node: torch.fx.Node) -> bool:
    """Dead-code elimination must keep ``node`` although nothing uses it: FX
    calls it impure, or its op must run (Note [Ops that must run]). Pass it as
    ``graph.eliminate_dead_code(is_impure_node=must_keep)``."""
    return node.is_impure() or (node.op == "call_function" and is_effectful(node))
