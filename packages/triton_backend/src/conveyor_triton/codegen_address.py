"""Addresses of a kernel's tensors (Note [Static layouts] in ``conveyor_triton.codegen``).

A *generic* kernel rebuilds a tensor's address from a linear index with a
``%`` and a ``//`` per dimension, its sizes and strides kernel arguments. A
*static* kernel knows every size and stride: size-1 dimensions are dropped,
dimensions contiguous with each other merged (:func:`merged`), and each
remaining dimension is a named index variable, ``(var // div) % size``,
computed once and shared by every tensor that needs it
(:meth:`AddressWriter.coord`); a contiguous tensor is addressed with the
linear index itself, a broadcast by a static multiple. In a row group the row
and the in-row parts of an address come from ``xindex`` (or a split
reduction's ``xrow``) and ``rindex`` separately when the row boundary falls
between dimensions (:func:`row_split`), from the full linear index
``findex`` otherwise.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import torch.fx

from conveyor_triton.dtypes import cast, to_stored
from conveyor_triton.kernel_source import TensorArg

if TYPE_CHECKING:
    from conveyor_triton.codegen import KernelWriter


class AddressWriter:
    """The lines of a kernel being written, the fresh names in them, and the
    index variables its addresses share.

    :param reduce: a row group's row length (None: a pointwise kernel).
    :param xvar: the variable a row's coordinates come from (``xindex``; a
        split reduction's ``xrow``).
    """

    def __init__(self, reduce: int | None, xvar: str) -> None:
        self.reduce = reduce
        self.xvar = xvar
        self.lines: list[str] = []
        self.coords: dict[tuple[str, str, int, int | None], str] = {}
        self.counter = 0

    def fresh(self, prefix: str) -> str:
        self.counter += 1
        return f"{prefix}{self.counter}"

    def offset(self, prefix: str, rank: int, index: str, out: list[str], indent: str) -> str:
        """A generic kernel's address of tensor ``prefix`` at linear ``index``."""
        if rank == 0:
            return f"({index} * 0)"
        rest, terms = index, []
        for j in range(rank - 1, 0, -1):
            c, q = self.fresh("c"), self.fresh("q")
            out.append(f"{indent}{c} = {rest} % {prefix}_size{j}")
            out.append(f"{indent}{q} = {rest} // {prefix}_size{j}")
            terms.append(f"{c} * {prefix}_stride{j}")
            rest = q
        terms.append(f"{rest} * {prefix}_stride0")
        return "(" + " + ".join(reversed(terms)) + ")"

    def coord(self, var: str, div: int, size: int | None, scope: str, out: list[str], indent: str) -> str:
        """``(var // div) % size`` as a named value, computed once per scope
        (``xindex``'s once per kernel); ``size`` None: the outermost dimension."""
        if div == 1 and size is None:
            return var
        rowwise = var in ("xindex", "xrow")
        key = ("outer" if rowwise else scope, var, div, size)
        if key not in self.coords:
            expr = var if div == 1 else f"({var} // {div})"
            if size is not None:
                expr = f"{expr} % {size}"
            name = self.fresh("x" if rowwise else "r")
            where, at = (self.lines, "    ") if rowwise else (out, indent)
            where.append(f"{at}{name} = {expr}")
            self.coords[key] = name
        return self.coords[key]

    def static_terms(
        self, dims: list[tuple[int, int]], var: str, scope: str, out: list[str], indent: str
    ) -> list[str]:
        """The address terms of ``dims`` (size, stride; row-major over ``var``)."""
        terms: list[str] = []
        div = 1
        for j in range(len(dims) - 1, -1, -1):
            size, stride = dims[j]
            if stride != 0:
                c = self.coord(var, div, None if j == 0 else size, scope, out, indent)
                terms.append(c if stride == 1 else f"{c} * {stride}")
            div *= size
        return terms[::-1]

    def static_offset(
        self, arg: TensorArg, strides: tuple[int, ...], full: bool, scope: str, out: list[str], indent: str
    ) -> str:
        """The address of ``arg`` (its value laid out with ``strides``, read at
        ``arg.shape`` in ``arg.permute`` order) in a static kernel. ``full``: in
        a row group's in-row scope."""
        dims_, x = dims(arg.shape, strides, arg.permute), self.xvar
        if not full:
            return " + ".join(self.static_terms(merged(dims_), x, scope, out, indent)) or f"{x} * 0"
        split = row_split(dims_, self.reduce)  # type: ignore[arg-type]
        if split is None:  # the row boundary falls inside a dimension
            return " + ".join(self.static_terms(merged(dims_), "findex", scope, out, indent)) or "findex * 0"
        outer = " + ".join(self.static_terms(merged(dims_[:split]), x, scope, out, indent)) or f"{x} * 0"
        inner = " + ".join(self.static_terms(merged(dims_[split:]), "rindex", scope, out, indent)) or "rindex * 0"
        return f"{outer} + {inner}"

    def address(self, prefix: str, arg: TensorArg, index: str, scope: str, out: list[str], indent: str) -> str:
        """The address of ``arg`` (argument ``prefix``) at ``index`` (``xindex``,
        or a row group's in-row ``findex``), static when ``arg.layout`` is set."""
        if arg.layout is None:
            return self.offset(prefix, arg.rank, index, out, indent)
        shape, strides = arg.layout
        return "(" + self.static_offset(arg, expanded(shape, strides, arg.shape), index == "findex", scope, out, indent) + ")"

    def store_at(
        self, prefix: str, arg: TensorArg, value: str, index: str, mask: str, scope: str, indent: str
    ) -> None:
        """Store ``value`` (in its compute dtype) into ``arg`` (argument ``prefix``) at ``index``."""
        off = self.address(prefix, arg, index, scope, self.lines, indent)
        stored = to_stored(cast(value, arg.dtype, arg.dtype), arg.dtype)
        self.lines.append(f"{indent}tl.store({prefix} + {off}, {stored}, mask={mask})")


def dims(shape: tuple[int, ...], strides: tuple[int, ...], permute: tuple[int, ...] | None) -> list[tuple[int, int]]:
    """(size, stride) per dimension in addressing order, size-1 dimensions dropped."""
    if permute is not None:
        shape, strides = tuple(shape[p] for p in permute), tuple(strides[p] for p in permute)
    return [(size, stride) for size, stride in zip(shape, strides) if size != 1]


def merged(dims: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """``dims`` with each dimension folded into the one before it when they are
    contiguous with each other (a contiguous tensor is one dimension of stride 1,
    a broadcast run one of stride 0)."""
    out: list[tuple[int, int]] = []
    for size, stride in dims:
        if out and out[-1][1] == stride * size:
            out[-1] = (out[-1][0] * size, stride)
        else:
            out.append((size, stride))
    return out


def row_split(dims: list[tuple[int, int]], reduce: int) -> int | None:
    """The position in ``dims`` where the in-row dimensions (``reduce``
    elements, trailing) begin, or None when the row boundary is inside one."""
    inner = 1
    for k in range(len(dims), -1, -1):
        if inner == reduce:
            return k
        if k == 0 or inner > reduce:
            return None
        inner *= dims[k - 1][0]
    return None


def expanded(shape: tuple[int, ...], strides: tuple[int, ...], to: tuple[int, ...]) -> tuple[int, ...]:
    """The strides of a value of ``shape`` and ``strides`` expanded to ``to``."""
    pad = len(to) - len(shape)
    padded = ((1,) * pad + shape, (0,) * pad + strides)
    return tuple(0 if s == 1 and t != 1 else st for s, st, t in zip(*padded, to))


def scope_coordinates(
    w: KernelWriter, node: torch.fx.Node, scope: str, out: list[str], indent: str
) -> tuple[tuple[int, ...], str, str, str, Callable[[int], str]]:
    """Where ``node`` is evaluated in ``scope``: the shape it is computed at
    (its own, or its user's for an absorbed producer), the index and its
    mask, the index variable coordinates come from, and a function writing the coordinate along one dimension of
    that shape (computed when first asked, by :meth:`KernelWriter.coord`)."""
    at = tuple(w.group.evaluate_at.get(node, tuple(node.meta["val"].shape)))
    index, mask = w.scope_index(scope)
    if w.group.members[node] == "row" and w.row_group:
        index, mask = "xindex", "xmask"
    var = w.xvar if index == "xindex" else index
    permute = w.perm(scope)
    order = list(permute) if permute is not None else list(range(len(at)))

    def coordinate(j: int) -> str:
        div = 1
        for p in order[order.index(j) + 1 :]:
            div *= at[p]
        return w.coord(var, div, at[j], scope, out, indent)

    return at, index, mask, var, coordinate
