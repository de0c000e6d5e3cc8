"""How a kernel is launched: block sizes, warps, grid, and whether a row
group's reduction is persistent.

Note [Launch configuration]: in Triton's interpreter (CPU) each program costs
about a millisecond whatever its size, so blocks are big and programs few.
On a GPU the choice follows what Inductor's heuristics do for the same
shapes:

* a pointwise kernel runs ``XBLOCK`` = 1024 elements per program (fewer for
  a small tensor) on ``XBLOCK / 256`` warps (1 to 4);
* a row group whose row fits in ``PERSISTENT_RBLOCK`` elements keeps the
  whole row in registers (a *persistent* reduction: every value loaded and
  computed once, no loops), with as many rows per program as fit a tile of
  ``TILE`` elements; a longer row loops over ``LOOP_RBLOCK``-element chunks,
  one row per program;
* a row group that reduces over leading dimensions (Note [Permuted groups]
  in ``conveyor_triton.fusion_rows``: a bias gradient sums a column of every
  row) is an *outer* reduction: its rows are the contiguous dimension, so a
  program takes 64 rows (coalesced loads along them), fewer (down to 8) where
  that would launch fewer than ``MIN_PROGRAMS`` programs, and the reduced
  elements in chunks that fill the tile, as Inductor's outer reduction
  configurations do; one row per program would read a column with a stride
  of the row length;
* a row group runs ``tile / 128`` warps (2 to 8), so a tile of 4096 elements
  keeps 16 of each live value per thread (ViT's fused softmax on a 4096
  tile and 4 warps used 255 registers and spilled).

A static kernel's launch is fixed when the program is compiled (Note [Static
layouts] in ``conveyor_triton.codegen``); a generic one's block sizes are
chosen per launch by :func:`block_sizes`, never persistent.

The device type launches are chosen for is the tensors' own, unless the
stage option ``launch_for`` (default: ``$CONVEYOR_TRITON_LAUNCH_FOR``) names
another: ``cuda`` on CPU runs, in the interpreter, the kernels and launches a
GPU would run (the ahead-of-time compile check and ``benchmarks/triton_ptx.py``
read their PTX; tests check their values).
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass

import torch

#: the longest row (rounded up to a power of two) a persistent reduction keeps in one tile: one
#: row of 4096 holds as many registers as the tile of any shorter rows (a layer norm's backward
#: over 8192 on 8 warps used 173 registers; over 4096, from 47 to 60 in its looped form)
PERSISTENT_RBLOCK = 4096
#: elements per program of a row group (rows times the row tile)
TILE = 4096
#: the chunk a looping reduction reads per step
LOOP_RBLOCK = 1024
#: an outer reduction narrows its blocks down to 8 rows to launch at least this many programs
#: (an H100 has 132 SMs: 1024 bias-gradient rows in blocks of 64 kept 16 of them busy, 0.3 ms a step)
MIN_PROGRAMS = 128
#: the interpreter's limits: elements per pointwise program, per row tile, per row-group program
_INTERPRETED = (1 << 15, 2048, 1 << 15)


def launch_device(option: str | None, device: torch.device) -> torch.device:
    """The device launches are chosen for: the ``launch_for`` option, else
    ``$CONVEYOR_TRITON_LAUNCH_FOR``, else ``device``."""
    chosen = option or os.environ.get("CONVEYOR_TRITON_LAUNCH_FOR")
    return torch.device(chosen) if chosen else device


def next_pow2(n: int) -> int:
    return 1 << max(n - 1, 0).bit_length()


@dataclass(frozen=True)
class Launch:
    """One kernel's launch. ``rblock`` is None for a pointwise kernel;
    ``persistent``: the whole row is one ``rblock`` tile."""

    xblock: int
    rblock: int | None
    num_warps: int
    grid: int
    persistent: bool
    #: floating-point contraction (FMA) allowed (Note [Explicit roundings and FMA] in conveyor_triton.dtypes)
    fp_fusion: bool = True
    #: a split reduction's first kernel: the chunks each row is cut into, and their length (Note [Split reductions])
    split: int = 1
    chunk: int | None = None

    @property
    def meta(self) -> dict[str, int]:
        """The launch's keyword arguments: block sizes, ``num_warps``, and
        ``enable_fp_fusion`` when contraction is off."""
        meta = {"XBLOCK": self.xblock, "num_warps": self.num_warps}
        if self.rblock is not None:
            meta["RBLOCK"] = self.rblock
        if not self.fp_fusion:
            meta["enable_fp_fusion"] = False
        return meta


def block_sizes(device: torch.device, xnumel: int, rnumel: int | None) -> dict[str, int]:
    """Block sizes of a generic kernel's launch (Note [Launch configuration]):
    looping reductions, chosen per launch."""
    if device.type != "cuda":
        pointwise, row, tile = _INTERPRETED
    else:
        pointwise, row, tile = 1024, LOOP_RBLOCK, TILE
    if rnumel is None:
        return {"XBLOCK": min(next_pow2(max(xnumel, 1)), pointwise)}
    rblock = min(next_pow2(max(rnumel, 1)), row)
    return {"XBLOCK": max(1, min(next_pow2(max(xnumel, 1)), tile // rblock)), "RBLOCK": rblock}


def choose(device: torch.device, xnumel: int, rnumel: int | None, outer: bool = False) -> Launch:
    """A static kernel's launch (Note [Launch configuration]); ``outer``: a
    row group reducing over leading dimensions."""
    interpreted = device.type != "cuda"
    rows = next_pow2(max(xnumel, 1))
    if rnumel is None:
        xblock = min(rows, _INTERPRETED[0] if interpreted else 1024)
        return Launch(xblock, None, max(1, min(xblock // 256, 4)), _cdiv(xnumel, xblock), False)
    whole = next_pow2(max(rnumel, 1))
    persistent_limit, tile = (_INTERPRETED[1], _INTERPRETED[2]) if interpreted else (PERSISTENT_RBLOCK, TILE)
    if outer and not interpreted:
        xblock = min(rows, max(64, tile // whole))
        while xblock > 8 and _cdiv(xnumel, xblock) < MIN_PROGRAMS:  # 32-byte row segments still coalesce
            xblock //= 2
        rblock = min(whole, max(1, tile // xblock))
        warps = max(2, min(xblock * rblock // 128, 8))
        return Launch(xblock, rblock, next_pow2(warps), _cdiv(xnumel, xblock), rblock >= whole)
    if whole <= persistent_limit:
        rblock, xblock, persistent = whole, max(1, min(rows, tile // whole)), True
    else:
        rblock, xblock, persistent = (_INTERPRETED[1] if interpreted else LOOP_RBLOCK), 1, False
    warps = max(2, min(xblock * rblock // 128, 8))
    return Launch(xblock, rblock, next_pow2(warps), _cdiv(xnumel, xblock), persistent)


# Note [Split reductions]: a row group launches one program per block of
# rows, so a reduction over few, long rows (a bias gradient of 256 columns
# over 4096 tokens, a sum of a whole tensor) keeps a few SMs busy while the
# others idle. On a GPU such a group, when its stored values are all
# reductions that do not read each other's results, runs as two kernels, as
# Inductor's split reductions do: the first cuts each row into ``split``
# chunks of ``chunk`` elements and reduces each (program-adjacent indexes are
# adjacent rows, so an outer reduction's loads stay coalesced), storing the
# partial results in the accumulator's dtype in a (chunk, row) buffer; the
# second reduces each row's partials (NaN still propagates through max and
# min) and stores the outputs as the one kernel would have. A sum is then
# added in another order, within the tolerance of any reordering (eager's
# own kernels on CPU and CUDA already differ in it).


def split_launches(device: torch.device, first: Launch, xnumel: int, rnumel: int) -> tuple[Launch, Launch] | None:
    """A split reduction's two launches for a looping row group launched as
    ``first``, or None when one kernel keeps enough SMs busy (Note [Split
    reductions])."""
    if device.type != "cuda" or first.persistent or first.rblock is None or first.grid * 2 > MIN_PROGRAMS:
        return None
    split = min(_cdiv(MIN_PROGRAMS, first.grid), _cdiv(rnumel, 2 * first.rblock), 64)
    if split < 2:
        return None
    chunk = _cdiv(_cdiv(rnumel, split), first.rblock) * first.rblock
    split = _cdiv(rnumel, chunk)
    grid = _cdiv(xnumel * split, first.xblock)
    rblock = next_pow2(split)
    xblock = max(1, min(next_pow2(max(xnumel, 1)), TILE // rblock))
    combine = Launch(xblock, rblock, next_pow2(max(2, min(xblock * rblock // 128, 8))), _cdiv(xnumel, xblock), True)
    return dataclasses.replace(first, grid=grid, split=split, chunk=chunk), combine


def _cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b
