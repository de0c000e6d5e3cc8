"""What a generated kernel is: its source, the tensors it reads and writes, in
argument order, and (a static kernel) its launch. Written by
:mod:`conveyor_triton.codegen` (and :mod:`conveyor_triton.codegen_combine`),
launched by :mod:`conveyor_triton.program`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
import torch.fx

from conveyor_triton.launch import Launch

#: a static kernel's strides for each value it stores
StoreStrides = dict[torch.fx.Node, tuple[int, ...]]


@dataclass(frozen=True)
class TensorArg:
    """A tensor the kernel reads or writes, and how its index space is laid out.

    :ivar node: the graph node whose run-time value it is (for a load), or the
        group member it stores.
    :ivar shape: the value's logical shape (a load expands the value to it).
    :ivar permute: the order the kernel addresses the dimensions in (Note
        [Permuted groups] in ``conveyor_triton.fusion_rows``), or None.
    """

    node: torch.fx.Node
    shape: tuple[int, ...]
    permute: tuple[int, ...] | None
    dtype: torch.dtype
    #: the value's own sizes and strides a static kernel was generated for
    #: (Note [Static layouts] in ``conveyor_triton.codegen``); None in a generic kernel
    layout: tuple[tuple[int, ...], tuple[int, ...]] | None = None

    def __post_init__(self) -> None:
        if self.permute is not None and sorted(self.permute) != list(range(len(self.shape))):
            raise ValueError(f"permute {self.permute} does not fit rank {len(self.shape)}")

    @property
    def rank(self) -> int:
        return len(self.shape)


@dataclass(frozen=True)
class KernelSource:
    """Generated source and the arguments it takes, in order. A generic kernel
    takes each load, then each store (pointer, sizes after the first,
    strides), then ``xnumel``, ``rnumel`` for a row group, then the block
    sizes; a static one (``launch`` set) takes each load's and store's pointer
    and the block sizes (Note [Static layouts] in ``conveyor_triton.codegen``)."""

    name: str
    source: str
    loads: tuple[TensorArg, ...]
    stores: tuple[TensorArg, ...]
    xnumel: int
    rnumel: int | None
    #: a static kernel's launch, fixed at compile time; None for a generic kernel
    launch: Launch | None = None

    @property
    def static(self) -> bool:
        return self.launch is not None


def kernel_text(name: str, params: Sequence[str], body: Sequence[str]) -> str:
    """The source of a module holding one ``@triton.jit`` function ``name``."""
    header = ["import triton", "import triton.language as tl", "", "", "@triton.jit", f"def {name}({', '.join(params)}):"]
    return "\n".join([*header, *body]) + "\n"
