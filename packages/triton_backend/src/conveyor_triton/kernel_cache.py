"""Generated kernels, cached by source hash in memory and on disk.

Kernel source is written to a real file and imported (Triton's interpreter was
seen to give wrong values for ``exec``'d source, and native compilation needs
the source file anyway). The directory can be shared by concurrent processes:
a file is written to a temporary name and renamed into place (atomic), and an
entry whose content does not match its hash (a torn or corrupt file) is
rewritten rather than trusted.

Importing a kernel runs it, so the folder must be the user's alone (Note
[Caches only the user can write] in :mod:`conveyor.runtime.files`): folders are made
0700 and files 0600; when the cache folder, or the folder of an entry, is
owned by someone else or writable by group or others, one warning names it
and the kernels go to a private temporary folder of this process instead
(removed at exit); an entry file that fails the rule is written again.
"""

from __future__ import annotations

import atexit
import hashlib
import importlib.util
import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

from conveyor.stage_api import may_read, may_write, user_cache_dir, write_atomic

_WHAT = "triton kernel cache"
_lock = threading.Lock()
_loaded: dict[str, tuple[Any, Path]] = {}  # source hash, name, path -> the jit function and its file
_private: list[Path] = []  # this process's own folder, for kernels a refused folder would have held


def default_dir() -> Path:
    """``$CONVEYOR_TRITON_CACHE``, else ``$XDG_CACHE_HOME/conveyor/triton``
    (``~/.cache/conveyor/triton``)."""
    env = os.environ.get("CONVEYOR_TRITON_CACHE")
    if env:
        return Path(env)
    return user_cache_dir("triton")


def source_hash(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


def path_for(cache_dir: Path, digest: str) -> Path:
    return cache_dir / digest[:2] / f"k_{digest}.py"


def _valid(path: Path, source: str) -> bool:
    try:
        return path.read_text(encoding="utf-8") == source
    except (OSError, UnicodeDecodeError):
        return False


def _entry(directory: Path, digest: str, source: str) -> Path:
    """The file holding ``source``, written when missing, torn or refused:
    in ``directory``, or in this process's private folder when a folder on
    the way is refused (Note [Caches only the user can write])."""
    path = path_for(directory, digest)
    if may_write(directory, path, _WHAT):
        usable = may_read(directory, path, _WHAT)
    else:
        path = path_for(_private_dir(), digest)
        usable = True  # made by this process (mkdtemp): nothing to check
    if not (usable and _valid(path, source)):
        write_atomic(path, source.encode("utf-8"))
    return path


def _private_dir() -> Path:
    """A folder only this process writes (``mkdtemp`` makes it 0700)."""
    if not _private:
        folder = Path(tempfile.mkdtemp(prefix="conveyor-triton-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        _private.append(folder)
    return _private[0]


def load(source: str, name: str, cache_dir: Path | None = None) -> tuple[Any, Path]:
    """The jit function ``name`` defined by ``source``, and the file it lives
    in (in this process's private folder when ``cache_dir`` is refused)."""
    digest = source_hash(source)
    directory = cache_dir if cache_dir is not None else default_dir()
    path = path_for(directory, digest)
    key = f"{digest}:{name}:{path}"
    with _lock:
        if key in _loaded:
            return _loaded[key]
        path = _entry(directory, digest, source)
        module_name = f"conveyor_triton_kernel_{digest[:24]}_{len(_loaded)}"
        spec = importlib.util.spec_from_file_location(module_name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module  # triton reads the source back through the module
        spec.loader.exec_module(module)
        fn = getattr(module, name)
        _loaded[key] = fn, path
        return fn, path
