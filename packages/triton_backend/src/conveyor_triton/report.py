"""The per-graph report: which kernels were generated from which nodes, and
which nodes run as aten calls and why. ``print(report)`` shows it."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class KernelEntry:
    """One generated kernel.

    :ivar name: the kernel function's name.
    :ivar nodes: the graph nodes fused into it, in order.
    :ivar kind: ``"pointwise"`` or ``"reduction"``.
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
