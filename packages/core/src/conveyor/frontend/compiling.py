"""Library code sees that a capture is a compile.

Note [A capture is a compile]: libraries ask ``torch.compiler.is_compiling()``
to take the path meant for a trace: transformers' method ``lru_cache``
(``compile_compatible_method_lru_cache``: BEiT's relative-position index)
caches the tensors it computes unless a compile is under way, and a capture's
tensors are fakes, so a cache filled during a capture handed a FakeTensor to
every later eager call of the class ("Please convert all Tensors to
FakeTensors first"). Dynamo holds torch's flag up while it compiles, as
``torch.export`` does; a standalone capture (``conveyor.compile``) holds it
up too, for the capture only, so a program sees during its capture what it
would see under dynamo. Whether this torch's ``is_compiling()`` reads that
flag is probed once; where it does not, a capture says so in a warning and
goes on without it.

A library path meant for a compile may call a function ``torch.compile``
optimized (transformers' Mamba then runs ``associative_scan``, which
compiles itself): the capture refuses it, and ``conveyor.compile`` compiles
the program through dynamo (Note [Compiled functions inside a capture]).
The flag is torch's own, for the process (``torch.export`` sets it the same
way), so another thread asking while a capture runs sees a compile too.
"""

from __future__ import annotations

import contextlib
import functools
import warnings
from collections.abc import Iterator

import torch


@functools.cache
def _flag_works() -> bool:
    """Setting ``torch.compiler._is_compiling_flag`` makes ``is_compiling()``
    true, and clearing it false (probed once, the flag left as found)."""
    compiler = torch.compiler
    if not hasattr(compiler, "_is_compiling_flag"):
        return False
    old = compiler._is_compiling_flag
    try:
        compiler._is_compiling_flag = True
        on = compiler.is_compiling()
        compiler._is_compiling_flag = False
        off = compiler.is_compiling()
    finally:
        compiler._is_compiling_flag = old
    return on and not off


@contextlib.contextmanager
def compiling() -> Iterator[None]:
    """``torch.compiler.is_compiling()`` is true inside (Note [A capture is a compile])."""
    if not _flag_works():
        warnings.warn(
            "conveyor: this torch's torch.compiler.is_compiling() cannot be told a capture is under way; "
            "library code will take its eager paths while conveyor traces (Note [A capture is a compile])",
            stacklevel=3,
        )
        yield
        return
    old = torch.compiler._is_compiling_flag
    torch.compiler._is_compiling_flag = True
    try:
        yield
    finally:
        torch.compiler._is_compiling_flag = old
