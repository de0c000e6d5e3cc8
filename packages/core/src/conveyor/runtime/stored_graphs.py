"""The stage graphs of a program loaded from the disk cache, unpickled when
first asked for.

Note [Stage graphs loaded on demand]: an entry of the disk cache (Note [Disk
cache entries] in :mod:`conveyor.runtime.disk_cache`) keeps, beside the
run-time callable, the graph after each stage, so that
``conveyor.last_graphs`` answers after a load as after a compile. A process
that loads a program almost never asks for them, yet unpickling them made
every graph of every stage: for a six-block training step, four graphs and
some 1,900 nodes, about 32,000 objects that the garbage collector then
walked in each full collection, and one more full collection (about 0.25 s)
in the first call than ``torch.compile(m)``'s. So they are stored as a
pickle of their own inside the entry, covered by its checksum like the rest,
and unpickled on first use: by ``conveyor.last_graphs``, or by the
structured trace when it writes one (Note [Structured trace]). Torch's
trace keeps a lazy handler until its first artifact, and asks for that
artifact's text even when the handler then finds no trace folder and
removes itself; so the hit is announced first, as an artifact of its own
(``conveyor_disk_cache_hit``: the entry), and the graphs, whose names are
stored beside them, only if something still listens. The program that runs
never reads them. Where a program was compiled in this process its graphs are a
plain tuple; everything that holds either reads them through
:func:`resolve`.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator, Sequence
from typing import overload

from conveyor.errors import ConveyorError
from conveyor.protocol import artifacts, structured_trace
from conveyor.protocol.stamps import StageGraph

__all__ = ["Graphs", "StoredGraphs", "emit", "resolve"]


class StoredGraphs(Sequence[StageGraph]):
    """The pickled stage graphs of one disk cache entry, unpickled on first
    use (Note [Stage graphs loaded on demand])."""

    __slots__ = ("_graphs", "_payload", "_where", "names")

    def __init__(self, payload: bytes, names: tuple[str, ...], where: str) -> None:
        self._payload = payload
        #: each graph's structured trace artifact name (``structured_trace.artifact_name``)
        self.names = names
        self._where = where
        self._graphs: tuple[StageGraph, ...] | None = None

    @property
    def loaded(self) -> bool:
        return self._graphs is not None

    def get(self) -> tuple[StageGraph, ...]:
        """The graphs; unpickled once.

        :raises ConveyorError: they do not unpickle (the entry checked out
            when it was loaded, so a class they need is gone or changed).
        """
        if self._graphs is None:
            try:
                graphs = artifacts.loads(self._payload)
            except Exception as exc:
                raise ConveyorError(
                    f"disk cache: the stage graphs stored with {self._where} cannot be unpickled "
                    f"({type(exc).__name__}: {exc}); delete that entry to compile the program again"
                ) from exc
            if not (isinstance(graphs, tuple) and graphs and all(isinstance(g, StageGraph) for g in graphs)):
                raise ConveyorError(f"disk cache: {self._where} holds {type(graphs).__name__}, not stage graphs")
            self._graphs, self._payload = graphs, b""
        return self._graphs

    @overload
    def __getitem__(self, index: int) -> StageGraph: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[StageGraph, ...]: ...
    def __getitem__(self, index: int | slice) -> StageGraph | tuple[StageGraph, ...]:
        return self.get()[index]

    def __len__(self) -> int:
        return len(self.get())

    def __iter__(self) -> Iterator[StageGraph]:
        return iter(self.get())

    def __repr__(self) -> str:
        return f"StoredGraphs({self._where}, {'loaded' if self.loaded else 'not loaded yet'})"


#: a program's stage graphs: made in this process, or stored with it on disk
Graphs = tuple[StageGraph, ...] | StoredGraphs


def emit(graphs: StoredGraphs, entry: str) -> None:
    """The hit on ``entry``, then each stored stamp, as structured trace
    artifacts (as ``structured_trace.emit_graphs``); a graph is unpickled
    only when the trace writes its text (Note [Stage graphs loaded on
    demand])."""
    sink = structured_trace._sink()
    if sink is None:
        return
    structured_trace._artifact(sink, "conveyor_disk_cache_hit", "string", lambda: entry)
    sink = structured_trace._sink()  # torch's lazy handler is gone unless a trace folder is set
    if sink is None:
        return
    for i, name in enumerate(graphs.names):
        structured_trace._artifact(sink, name, "string", functools.partial(_text, graphs, i))


def _text(graphs: StoredGraphs, index: int) -> str:
    return str(graphs[index])


def resolve(graphs: Graphs) -> tuple[StageGraph, ...]:
    """``graphs`` as a tuple (unpickled, if stored and not yet)."""
    return graphs if isinstance(graphs, tuple) else graphs.get()
