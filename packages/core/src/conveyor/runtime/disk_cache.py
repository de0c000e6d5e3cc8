"""The persistent compile cache: compiled programs kept on disk, so that a
new process compiling the same program skips the pipeline.

What is stored is what ``Pipeline.compile`` returns for one request: the
run-time callable (the stages' plans, the final graphs, a backend's
program) and the graph after each stage (so ``conveyor.last_graphs`` works
after a load), pickled by :mod:`conveyor.protocol.artifacts` (Note [Picklable
run-time callables]); the stage graphs as a pickle of their own, unpickled
only when asked for (Note [Stage graphs loaded on demand] in
:mod:`conveyor.runtime.stored_graphs`). The core names no stage: a program
whose callable cannot be pickled is simply not stored (a debug message in
the ``conveyor.runtime.disk_cache`` log names the object).

Note [Disk cache entries]: one file per key (:mod:`conveyor.runtime.disk_key`),
``<cache_dir>/<key[:2]>/<key>.program``: a header (magic, format version,
the key itself, sha256 of the payload), then the payload. An entry whose
recorded key is not the one looked up (a file copied or renamed under
another program's name) is not trusted. A file that is truncated, garbled,
of another format version or that fails to unpickle is deleted and the
program compiled again; a writer writes a temporary file in the same folder
and renames it into place, so concurrent writers and readers never see a
torn entry. A compile that warns is not stored (its warnings are part of
what the program does; the next process compiles and warns again). Nothing
is ever evicted: delete the folder to empty the cache. An entry is loaded
from, and written into, only folders that the user alone can write (Note
[Caches only the user can write] in :mod:`conveyor.runtime.files`).

Only static-shape requests are cached: a symbolic compile adds guards to
the live shape environment that a stored program could not replay.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import logging
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from conveyor.protocol import artifacts, structured_trace
from conveyor.protocol.config import Config
from conveyor.protocol.stage import CompiledFn, Request
from conveyor.protocol.stamps import StageGraph
from conveyor.runtime import disk_key, stored_graphs
from conveyor.runtime.files import may_read, may_write, user_cache_dir, write_atomic
from conveyor.runtime.stored_graphs import Graphs, StoredGraphs

log = logging.getLogger("conveyor.disk_cache")
#: hits and misses, at INFO (Note [Recompile reasons] in ``conveyor.runtime.recompiles``)
info = logging.getLogger("conveyor")

Compiled = tuple[CompiledFn, tuple[StageGraph, ...]]
#: a program loaded or compiled: its stage graphs may still be pickled
Loaded = tuple[CompiledFn, Graphs]

_MAGIC = b"conveyor-program\n"
_KEY = len(_MAGIC) + 4  # where the key's 32 bytes start
_HEADER = _KEY + 32 + 32
_WHAT = "compile cache"


def default_dir() -> Path:
    """``$XDG_CACHE_HOME/conveyor/programs``, else ``~/.cache/conveyor/programs``."""
    return user_cache_dir("programs")


def cache_dir(config: Config) -> Path:
    """Where ``config`` keeps compiled programs."""
    return Path(config.cache_dir) if config.cache_dir else default_dir()


def compile_cached(pipeline: Any, request: Request, compile: Callable[[Request], Compiled]) -> Loaded:
    """``compile(request)``, or the program a process compiled before for the
    same key, loaded from disk (Note [Disk cache entries])."""
    config: Config = pipeline.config
    if not config.cache:
        return compile(request)
    key, why = disk_key.program_key(pipeline, request)
    if key is None:
        info.info("disk cache not used for this %s: %s", request.label, why)
        return compile(request)
    path = entry_path(cache_dir(config), key)
    found = load(path, len(request.inputs), key)
    if found is not None:
        info.info("disk cache hit %s: loaded %s", key[:12], path)
        stored_graphs.emit(found[1], str(path))  # Note [Structured trace]: the stamps stored with it
        _record(key)
        return found
    info.info("disk cache miss %s: compiling the %s", key[:12], request.label)
    caught: list[warnings.WarningMessage] = []
    try:
        with warnings.catch_warnings(record=True) as caught:
            result = compile(request)
    finally:
        _reemit(caught)  # outside the block: to the caller's filters and handlers
    if caught:
        log.debug("not stored: the compile warned (%s)", caught[0].message)
    elif store(path, result, key):
        _record(key)
    return result


#: the keys of the programs loaded or stored while :func:`recording` (Note [Keyed before capture])
_recorded: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("conveyor_disk_keys", default=None)


@contextlib.contextmanager
def recording() -> Iterator[list[str]]:
    """The keys of the entries :func:`compile_cached` loads or stores in the
    block, in order (Note [Keyed before capture] in
    :mod:`conveyor.runtime.dynamo_key`)."""
    keys: list[str] = []
    token = _recorded.set(keys)
    try:
        yield keys
    finally:
        _recorded.reset(token)


def _record(key: str) -> None:
    keys = _recorded.get()
    if keys is not None:
        keys.append(key)


def entry_path(directory: Path, key: str) -> Path:
    return directory / key[:2] / f"{key}.program"


def _root(path: Path) -> Path:
    """The cache folder of the entry at ``path`` (see :func:`entry_path`)."""
    return path.parent.parent


def load(path: Path, inputs: int, key: str) -> tuple[CompiledFn, StoredGraphs] | None:
    """The entry for ``key`` at ``path``, a program of ``inputs`` inputs;
    ``None`` when there is none, when a
    folder on its way or the entry is not the user's alone (Note [Caches only
    the user can write]: one warning), or when it is corrupt, stale or
    recorded for another key (then it is deleted)."""
    if not may_read(_root(path), path, _WHAT):
        return None
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        log.debug("cannot read %s: %s", path, exc)
        return None
    try:
        result = _decode(data, inputs, key)
    except Exception as exc:  # a corrupt entry is rebuilt, never trusted
        log.debug("discarding cache entry %s: %s: %s", path, type(exc).__name__, exc)
        _remove(path)
        return None
    log.debug("loaded %s", path)
    return result


def store(path: Path, result: Compiled, key: str) -> bool:
    """Write ``result``, compiled for ``key``, to ``path`` atomically;
    ``False`` (logged) when it cannot be pickled or written, or when a folder
    on its way is not the user's alone (Note [Caches only the user can
    write]: one warning)."""
    compiled, graphs = result
    inputs = sum(1 for n in graphs[0].graph.graph.nodes if n.op == "placeholder") if graphs else 0
    try:  # Note [Stage graphs loaded on demand]: a pickle of their own
        names = tuple(structured_trace.artifact_name(g) for g in graphs)
        payload = artifacts.dumps((compiled, inputs, names, artifacts.dumps(graphs)))
    except artifacts.Unpicklable as exc:
        log.debug("not stored (cannot pickle the compiled program): %s", exc)
        return False
    header = (
        _MAGIC,
        disk_key.FORMAT_VERSION.to_bytes(4, "little"),
        bytes.fromhex(key),
        hashlib.sha256(payload).digest(),
    )
    data = b"".join((*header, payload))
    if not may_write(_root(path), path, _WHAT):
        return False
    try:
        write_atomic(path, data)
    except OSError as exc:
        log.debug("cannot write %s: %s", path, exc)
        return False
    log.debug("stored %s (%d bytes)", path, len(data))
    return True


def _decode(data: bytes, inputs: int, key: str) -> tuple[CompiledFn, StoredGraphs]:
    if len(data) < _HEADER or not data.startswith(_MAGIC):
        raise ValueError("not a conveyor program file (truncated or garbled header)")
    version = int.from_bytes(data[len(_MAGIC) : _KEY], "little")
    if version != disk_key.FORMAT_VERSION:
        raise ValueError(f"format version {version}, this conveyor writes {disk_key.FORMAT_VERSION}")
    if data[_KEY : _KEY + 32] != bytes.fromhex(key):
        raise ValueError(
            f"recorded for key {data[_KEY : _KEY + 32].hex()[:12]}, not {key[:12]} (a copied or renamed entry)"
        )
    digest, payload = data[_KEY + 32 : _HEADER], data[_HEADER:]
    if hashlib.sha256(payload).digest() != digest:
        raise ValueError("checksum mismatch (truncated or garbled payload)")
    result = artifacts.loads(payload)
    if not (
        isinstance(result, tuple)
        and len(result) == 4
        and callable(result[0])
        and isinstance(result[1], int)
        and isinstance(result[2], tuple)
        and all(isinstance(name, str) for name in result[2])
        and isinstance(result[3], bytes)
    ):
        raise ValueError(f"unexpected content {type(result).__name__}")
    compiled, stored_inputs, names, graphs = result
    if stored_inputs != inputs:
        raise ValueError(f"the stored program takes {stored_inputs} inputs, the request has {inputs}")
    return compiled, StoredGraphs(graphs, names, f"entry {key[:12]}")


def _reemit(caught: list[warnings.WarningMessage]) -> None:
    for w in caught:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno, source=w.source)


def _remove(path: Path) -> None:
    try:
        path.unlink()
    except OSError:
        pass
