"""Run-time counters: kernels launched, aten calls, bytes moved.

Off unless a :func:`counting` block is active (one list check per step
otherwise). Bytes are inputs read plus outputs written, each tensor counted by
the distinct elements it addresses (a broadcast input is read once), summed
over launches: the measure ``benchmarks/triton_kernels.py`` compares with
eager and TorchInductor.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch

_active: list[Counters] = []
#: receivers of every kernel launch (Note [Launch watchers])
_watchers: list[Callable[[Any, Sequence[Any], Mapping[str, int]], None]] = []


@dataclass
class Counters:
    """What ran inside one :func:`counting` block."""

    kernels: int = 0
    aten_calls: int = 0
    bytes: int = 0

    @property
    def launches(self) -> int:
        """Generated kernels plus aten calls (each a kernel of its own)."""
        return self.kernels + self.aten_calls


def tensor_bytes(t: torch.Tensor) -> int:
    """Bytes of the distinct elements ``t`` addresses."""
    distinct = math.prod(s for s, st in zip(t.shape, t.stride()) if st != 0)
    return distinct * t.element_size()


def _tensors(values: Iterable[Any]) -> Iterator[torch.Tensor]:
    for v in values:
        if isinstance(v, torch.Tensor):
            yield v
        elif isinstance(v, (list, tuple)):
            yield from _tensors(v)


def active() -> bool:
    return bool(_active)


def record(kind: str, reads: Iterable[Any], writes: Iterable[Any]) -> None:
    """Count one kernel (``kind="kernel"``) or aten call (``"aten"``)."""
    moved = sum(tensor_bytes(t) for t in _tensors(reads)) + sum(tensor_bytes(t) for t in _tensors(writes))
    for c in _active:
        if kind == "kernel":
            c.kernels += 1
        else:
            c.aten_calls += 1
        c.bytes += moved


@contextmanager
def counting() -> Iterator[Counters]:
    """Count what triton programs run inside the block."""
    counters = Counters()
    _active.append(counters)
    try:
        yield counters
    finally:
        _active.remove(counters)


# Note [Launch watchers]: a tool that needs each launch as Triton sees it (the
# ahead-of-time compile check, ``benchmarks/triton_ptx.py``) registers a
# callable with :func:`watching_launches`; every kernel launch then calls it
# with the :class:`~conveyor_triton.codegen.KernelSource`, the positional
# arguments exactly as passed to the jit function (tensors and ints), and the
# launch's keyword arguments (block sizes, ``num_warps``, ``num_stages``).
# Off unless a watcher is registered (one list check per launch).


def watched() -> bool:
    return bool(_watchers)


def launched(source: Any, args: Sequence[Any], meta: Mapping[str, int]) -> None:
    """Tell every watcher about one launch (Note [Launch watchers])."""
    for w in list(_watchers):
        w(source, args, meta)


@contextmanager
def watching_launches(watcher: Callable[[Any, Sequence[Any], Mapping[str, int]], None]) -> Iterator[None]:
    """Call ``watcher(source, args, meta)`` for every kernel launched inside the block."""
    _watchers.append(watcher)
    try:
        yield
    finally:
        _watchers.remove(watcher)
