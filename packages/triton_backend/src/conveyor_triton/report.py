"""The per-graph report: which kernels were generated from which nodes, and
which nodes run as aten calls and why. ``print(report)`` shows it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: ops that still run as aten calls though a kernel could compute them, and
#: why (issue 22, "kernels where aten runs today"); keyed by the op's name
#: without the overload, as ``str(op.overloadpacket)`` gives it
STAYS_ATEN: dict[str, str] = {
    "aten.scatter_reduce": "prod, mean, amax and amin have no kernel yet (a sum is one: Note [Scatters] in "
    "conveyor_triton.scatters); amax/amin would need eager's NaN order under atomics, prod float atomics Triton lacks",
    "aten.index_reduce": "no kernel yet (Note [Scatters] covers index_put, so index_add and index_copy)",
    "aten.sort": "a sort along a dimension (tl.sort sorts a power-of-two tile; no stable sort with "
    "eager's NaN order yet)",
    "aten.topk": "a selection along a dimension (no kernel yet)",
    "aten.nll_loss_backward": "kept whole by the decomposition table (conveyor_triton.decompose): a scatter",
}


def no_lowering(target: Any) -> str:
    """The report's reason for an op with no lowering: its entry of
    :data:`STAYS_ATEN` when it has one."""
    packet = getattr(target, "overloadpacket", None)
    why = STAYS_ATEN.get(str(packet)) if packet is not None else None
    return f"no lowering for {target}" + (f": {why}" if why else "")


@dataclass(frozen=True)
class KernelEntry:
    """One generated kernel.

    :ivar name: the kernel function's name.
    :ivar nodes: the graph nodes fused into it, in order.
    :ivar kind: ``"pointwise"``, ``"reduction"`` or ``"scatter"`` (Note [Scatters]).
    :ivar source: the generated Triton source.
    """

    name: str
    nodes: tuple[str, ...]
    kind: str
    source: str

    def __post_init__(self) -> None:
        if not self.nodes:
            raise ValueError(f"kernel {self.name} fuses no node")


@dataclass(frozen=True)
class Fallback:
    """A node run as an aten call between kernels, and why."""

    node: str
    target: str
    reason: str


@dataclass(frozen=True)
class Report:
    """What the triton backend made of one graph (``label``: forward, backward, ...)."""

    label: str
    kernels: tuple[KernelEntry, ...]
    fallbacks: tuple[Fallback, ...]
    views: int
    notes: tuple[str, ...] = ()

    def __str__(self) -> str:
        lines = [f"# conveyor_triton: {self.label}: {len(self.kernels)} kernel(s), "
                 f"{len(self.fallbacks)} aten fallback(s), {self.views} view(s)"]
        lines += [f"# note: {n}" for n in self.notes]
        for k in self.kernels:
            lines.append(f"kernel {k.name} ({k.kind}): {', '.join(k.nodes)}")
        for f in self.fallbacks:
            lines.append(f"aten   {f.node} = {f.target}: {f.reason}")
        return "\n".join(lines)

    def sources(self) -> str:
        """Every kernel's generated source, one after the other."""
        return "\n".join(f"# ---- {k.name}\n{k.source}" for k in self.kernels)
