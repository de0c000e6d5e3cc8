"""Reading what the compiler made of a kernel: its PTX (global loads and
stores, vectorized or scalar; integer divisions) and ptxas's report
(registers, spills, stack), one kernel at a time (:func:`ptx_stats`) or
summed over compiled kernels (:func:`summarize`). Part of the ahead-of-time
check (Note [Ahead-of-time check] in ``conveyor_triton.aot``).
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from conveyor_triton.aot_compile import Result


@dataclass(frozen=True)
class PtxStats:
    """What one compiled kernel's PTX and ptxas report say. Loads and stores
    count PTX instructions (one per vector or scalar access a thread makes);
    a vectorized one is ``ld.global.v2``/``.v4``/``.v8``."""

    loads_vector: int = 0
    loads_scalar: int = 0
    stores_vector: int = 0
    stores_scalar: int = 0
    int_divs: int = 0
    registers: int | None = None
    spill_stores: int | None = None
    spill_loads: int | None = None
    stack: int | None = None
    shared: int | None = None

    @property
    def vectorized(self) -> bool:
        """Some global load or store is vectorized."""
        return bool(self.loads_vector or self.stores_vector)

    @property
    def spills(self) -> bool:
        return bool(self.spill_stores or self.spill_loads)


_GLOBAL = re.compile(r"^\s*(?:@!?%\w+\s+)?(ld|st)\.global((?:\.[\w:]+)*)", re.M)
_INT_DIV = re.compile(r"^\s*(?:@!?%\w+\s+)?(?:div|rem)\.[su](?:16|32|64)\b", re.M)
_REGS = re.compile(r"Used (\d+) registers")
_SPILL = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")


def ptx_stats(ptx: str, ptxas_log: str = "", shared: int | None = None) -> PtxStats:
    """Count global accesses and integer divisions in ``ptx``; registers,
    spills and stack from ``ptxas_log`` (``ptxas -v``; None when absent)."""
    counts = {"ld": [0, 0], "st": [0, 0]}
    for m in _GLOBAL.finditer(ptx):
        vector = any(part in (".v2", ".v4", ".v8") for part in re.findall(r"\.[\w:]+", m.group(2)))
        counts[m.group(1)][0 if vector else 1] += 1
    regs = _REGS.search(ptxas_log)
    spill = _SPILL.search(ptxas_log)
    return PtxStats(
        loads_vector=counts["ld"][0],
        loads_scalar=counts["ld"][1],
        stores_vector=counts["st"][0],
        stores_scalar=counts["st"][1],
        int_divs=len(_INT_DIV.findall(ptx)),
        registers=int(regs.group(1)) if regs else None,
        stack=int(spill.group(1)) if spill else None,
        spill_stores=int(spill.group(2)) if spill else None,
        spill_loads=int(spill.group(3)) if spill else None,
        shared=shared,
    )


@dataclass
class Summary:
    """Figures over compiled kernels (one target)."""

    kernels: int = 0
    errors: int = 0
    no_vector: int = 0
    loads_vector: int = 0
    loads_scalar: int = 0
    stores_vector: int = 0
    stores_scalar: int = 0
    int_divs: int = 0
    max_registers: int = 0
    spilling: list[str] = field(default_factory=list)
    never_vectorized: list[str] = field(default_factory=list)

    def add(self, r: Result) -> None:
        self.kernels += 1
        if r.stats is None:
            self.errors += 1
            return
        s = r.stats
        if not s.vectorized:
            self.no_vector += 1
            self.never_vectorized.append(r.name)
        self.loads_vector += s.loads_vector
        self.loads_scalar += s.loads_scalar
        self.stores_vector += s.stores_vector
        self.stores_scalar += s.stores_scalar
        self.int_divs += s.int_divs
        self.max_registers = max(self.max_registers, s.registers or 0)
        if s.spills:
            self.spilling.append(r.name)

    @property
    def pct_no_vector(self) -> float:
        return 100.0 * self.no_vector / max(1, self.kernels - self.errors)

    @property
    def pct_loads_vectorized(self) -> float:
        return 100.0 * self.loads_vector / max(1, self.loads_vector + self.loads_scalar)


def summarize(results: Iterable[Result], arch: int = 90) -> Summary:
    s = Summary()
    for r in results:
        if r.arch == arch:
            s.add(r)
    return s
