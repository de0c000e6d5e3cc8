"""What an op's schema says about aliasing: which arguments it writes, which
returns alias which arguments (the parser under ``conveyor.analysis.schema``).

The Python bindings of ``FunctionSchema`` give ``alias_info`` for a top-level
``Tensor(a!)`` but not for the element of a list (``Tensor(a)[]`` returned by
``split``, ``Tensor(a!)[]`` taken by ``_foreach_add_``), so the annotations are
read from the schema's text, which the bindings print in full.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

import torch

_ANNOTATION = re.compile(r"Tensor\??\(([^)]*)\)")
#: ops that write arguments their schema does not annotate (``native_batch_norm``
#: updates its running statistics in training mode). Stages that run ops under
#: torch's own functionalization never see these writes (torch replaces the op by
#: its functional variant); an analysis of the graph as written must.
UNDECLARED_WRITES = {"aten::native_batch_norm": frozenset({"running_mean", "running_var"})}
#: ops that change which storage a tensor uses, which their schema does not declare:
#: ``a.set_(b)``, ``a.set_data(b)`` and ``a.shallow_copy_data_(b)`` (new in torch 2.14)
#: make ``a`` alias ``b`` (the schema says only that they write ``a``); the functional
#: ``aten::set`` returns a tensor on ``source``'s storage although its return carries no
#: alias annotation. Names an installed torch lacks are simply never met.
STORAGE_SWAPPING_OPS = frozenset({"aten::set_", "aten::set_data", "aten::set", "aten::shallow_copy_data_"})
#: ops that address their argument's *storage*, by an absolute storage offset and
#: strides, not the tensor they are called on: the ``as_strided`` family, and
#: ``resize_`` (which functionalization replays as an ``as_strided`` of a value
#: dense from offset 0, and which grows the storage it finds). A pass that gives
#: such an argument another storage (a fresh functional value, a synthetic base)
#: changes which elements they reach (Note [Storage offsets functionalization
#: cannot replay] in ``conveyor_functionalize``).
STORAGE_ADDRESSING_OPS = frozenset(
    {"aten::as_strided", "aten::as_strided_", "aten::as_strided_copy", "aten::as_strided_scatter", "aten::resize_"}
)


@dataclass(frozen=True)
class ArgAlias:
    """One schema argument.

    :ivar name: the argument's name (its keyword in an FX node's kwargs).
    :ivar alias_sets: the alias-set names before the call (``{"a"}`` for ``Tensor(a!)``).
    :ivar is_write: the op writes the memory of this argument (a tensor's memory:
        ``Tensor(a!)`` or ``Tensor(a!)[]``; a list argument written as a list,
        ``t[](a!)`` or ``Tensor[](a!)``, is not).
    :ivar holds_tensors: the argument is a tensor, an optional tensor or a list of them.
    :ivar declared: the write (if any) is in the schema; ``False`` for the
        ``UNDECLARED_WRITES`` (alias set ``"undeclared <name>"``).
    """

    name: str
    alias_sets: frozenset[str]
    is_write: bool
    holds_tensors: bool
    declared: bool = True

    def __post_init__(self) -> None:
        if self.is_write and not self.alias_sets:
            raise ValueError(f"argument {self.name!r} is written but has no alias set")


@dataclass(frozen=True)
class ReturnAlias:
    """One schema return.

    :ivar alias_sets: the arguments' alias sets this return aliases (empty: fresh memory).
    :ivar holds_tensors: the return is a tensor or a list of tensors.
    """

    alias_sets: frozenset[str]
    holds_tensors: bool


@dataclass(frozen=True)
class OpAliasing:
    """The aliasing an op's schema declares."""

    args: tuple[ArgAlias, ...]
    returns: tuple[ReturnAlias, ...]
    random: bool

    def __post_init__(self) -> None:
        names = [a.name for a in self.args]
        if len(set(names)) != len(names):
            raise ValueError(f"argument names repeat: {names}")

    def arg_sets(self) -> frozenset[str]:
        """Every alias set some argument belongs to (a return naming any other set, or
        ``*``, may alias memory the analysis cannot see: the wildcard)."""
        return frozenset().union(*(a.alias_sets for a in self.args))


def _split_top_level(text: str) -> list[str]:
    """Split ``text`` at commas outside brackets and parentheses."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        if ch in "([":
            depth += 1
        elif ch in ")]":
            depth -= 1
        elif ch == "," and depth == 0:
            parts.append(text[start:i].strip())
            start = i + 1
    tail = text[start:].strip()
    if tail:
        parts.append(tail)
    return parts


def _annotation(text: str) -> tuple[frozenset[str], bool]:
    """The alias sets (before the call) and the write flag in an argument's or return's text."""
    match = _ANNOTATION.search(text)
    if match is None:
        return frozenset(), False
    before = match.group(1).split("->")[0].strip()
    is_write = before.endswith("!")
    names = frozenset(n.strip() for n in before.rstrip("!").split("|") if n.strip())
    return names, is_write


def _matching_paren(text: str, open_paren: int) -> int:
    """The index of the parenthesis that closes the one at ``open_paren``."""
    depth = 0
    for index in range(open_paren, len(text)):
        depth += text[index] == "("
        depth -= text[index] == ")"
        if depth == 0:
            return index
    raise ValueError(f"unbalanced parentheses in {text!r}")


def _schema_parts(schema: torch._C.FunctionSchema) -> tuple[list[str], list[str]]:
    """The texts of the arguments and of the returns of ``schema``."""
    text = str(schema)
    open_paren = text.index("(")
    close = _matching_paren(text, open_paren)
    # ``*`` starts the keyword-only arguments; ``...`` is a TorchScript vararg
    args = [a for a in _split_top_level(text[open_paren + 1 : close]) if a not in ("*", "...")]
    rets = text[close + 1 :].split("->", 1)[1].strip()
    if rets.startswith("(") and rets.endswith(")"):
        rets = rets[1:-1]
    return args, [r for r in _split_top_level(rets) if r != "..."]


@functools.cache
def op_aliasing(op: torch._ops.OpOverload) -> OpAliasing:
    """Read the aliasing facts of ``op`` from its schema (cached per op)."""
    schema = op._schema
    arg_texts, ret_texts = _schema_parts(schema)
    if len(arg_texts) != len(schema.arguments) or len(ret_texts) != len(schema.returns):
        raise ValueError(f"cannot read the schema of {op}: {schema}")
    args = []
    undeclared = UNDECLARED_WRITES.get(schema.name, frozenset())
    for arg, text in zip(schema.arguments, arg_texts, strict=True):
        sets, is_write = _annotation(text)
        if arg.name in undeclared:
            args.append(ArgAlias(arg.name, frozenset({f"undeclared {arg.name}"}), True, True, declared=False))
            continue
        args.append(ArgAlias(arg.name, sets, is_write, "Tensor" in str(arg.type)))
    returns = []
    for ret, text in zip(schema.returns, ret_texts, strict=True):
        sets, _ = _annotation(text)
        returns.append(ReturnAlias(sets, "Tensor" in str(ret.type)))
    random = torch.Tag.nondeterministic_seeded in op.tags
    return OpAliasing(tuple(args), tuple(returns), random)


def is_storage_swapping(op: torch._ops.OpOverload) -> bool:
    """Whether ``op`` may make its arguments share storage in a way its schema does not declare."""
    return op._schema.name in STORAGE_SWAPPING_OPS
