"""The memory cache of compiled entries, one kind for both entry points.

Note [One entry cache]: ``conveyor.compile`` (:class:`~conveyor.compiled.Compiled`)
and the dynamo backend (:class:`~conveyor.dynamo.DynamoCompiled`) keep what
they compiled in an :class:`EntryCache`, keyed by a typed key
(:class:`~conveyor.runtime.recompiles.CallKey` /
:class:`~conveyor.runtime.recompiles.DynamoKey`, named tuples whose core part
is ``conveyor.runtime.cache.call_key`` of the call's signature: Note [The
call signature]). The cache is where a lookup is decided, so it is where the
log says so (Note [Recompile reasons]): the first reuse of an entry by its
key is a ``memory cache hit``; a miss names what differs from the closest
key held. Entries that stand for one specialization are kept for the
object's life; entries a caller marks ``recent`` (the latest sizes a
symbolic entry served: a per-call guard check saved) are kept up to a bound,
the oldest dropped first. Nothing is hashed for the log with INFO off.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from conveyor.runtime import recompiles

K = TypeVar("K", bound=tuple[Any, ...])
E = TypeVar("E")


class EntryCache(Generic[K, E]):
    """Compiled entries by key (Note [One entry cache]).

    :ivar name: the compiled object's name in the log (``f``, ``dynamo graph 0/0``).
    :ivar diff: what differs between two keys, in words (for a miss; the
        caller may give one per miss instead, naming that call's inputs).
    :ivar recent_limit: how many ``recent`` entries are kept.
    """

    __slots__ = ("_held", "_logged", "_recent", "diff", "name", "recent_limit")

    def __init__(self, name: str, diff: Callable[[K, K], list[str]] | None = None, recent_limit: int = 256) -> None:
        self.name = name
        self.diff = diff
        self.recent_limit = recent_limit
        self._held: dict[K, E] = {}
        self._recent: dict[K, E] = {}
        self._logged: set[K] = set()

    def get(self, key: K, how: str = "") -> E | None:
        """The entry of ``key`` (``None``: a miss; log it with :meth:`miss`)."""
        entry = self._held.get(key)
        if entry is None:
            entry = self._recent.get(key)
        if entry is not None and recompiles.enabled():
            self.hit(key, how)
        return entry

    def hit(self, key: K, how: str = "") -> None:
        """Log the first reuse of an entry by ``key`` (the caller found it
        another way: a symbolic entry whose size guards hold)."""
        if key not in self._logged:
            self._logged.add(key)
            recompiles.hit(self.name, key, how)

    def put(self, key: K, entry: E, recent: bool = False) -> None:
        """Keep ``entry`` under ``key``; ``recent``: among the bounded recent ones."""
        if not recent:
            self._held[key] = entry
            return
        self._recent[key] = entry
        if len(self._recent) > self.recent_limit:
            del self._recent[next(iter(self._recent))]

    def miss(
        self,
        key: K,
        how: str = "",
        diff: Callable[[K, K], list[str]] | None = None,
        against: list[K] | None = None,
    ) -> None:
        """Log that ``key`` missed (call only with :func:`recompiles.enabled`):
        a first compile, or what differs (``diff``, else the cache's) from the
        closest key held (or from the keys ``against``, where the caller
        compares with others)."""
        differ = diff or self.diff or (lambda old, new: [])
        recompiles.miss(self.name, key, list(self) if against is None else against, differ, how)

    def __contains__(self, key: object) -> bool:
        return key in self._held or key in self._recent

    def __iter__(self) -> Iterator[K]:
        """The keys held (the recent ones after the others)."""
        yield from self._held
        yield from self._recent

    def __len__(self) -> int:
        return len(self._held) + len(self._recent)
