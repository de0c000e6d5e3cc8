"""Generated kernels, cached by source hash in memory and on disk.

Kernel source is written to a real file and imported (Triton's interpreter was
seen to give wrong values for ``exec``'d source, and native compilation needs
the source file anyway). The directory can be shared by concurrent processes:
a file is written to a temporary name and renamed into place (atomic), and an
entry whose content does not match its hash (a torn or corrupt file) is
rewritten rather than trusted.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os
import sys
import threading
from pathlib import Path
from typing import Any

from conveyor.files import user_cache_dir, write_atomic

_lock = threading.Lock()
_loaded: dict[str, Any] = {}  # source hash -> the jit function, for this process


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


def load(source: str, name: str, cache_dir: Path | None = None) -> tuple[Any, Path]:
    """The jit function ``name`` defined by ``source``, and the file it lives in."""
    digest = source_hash(source)
    directory = cache_dir if cache_dir is not None else default_dir()
    path = path_for(directory, digest)
    key = f"{digest}:{name}:{path}"
    with _lock:
        if key in _loaded:
            return _loaded[key], path
        if not _valid(path, source):
            write_atomic(path, source.encode("utf-8"))
        module_name = f"conveyor_triton_kernel_{digest[:24]}_{len(_loaded)}"
        spec = importlib.util.spec_from_file_location(module_name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[module_name] = module  # triton reads the source back through the module
        spec.loader.exec_module(module)
        fn = getattr(module, name)
        _loaded[key] = fn
        return fn, path
