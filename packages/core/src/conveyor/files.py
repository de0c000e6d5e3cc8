"""Files that several processes share: the user's cache folder, and writes
that a concurrent reader never sees half done."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def user_cache_dir(*parts: str) -> Path:
    """``$XDG_CACHE_HOME/conveyor/<parts>``, else ``~/.cache/conveyor/<parts>``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base, "conveyor", *parts)


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder,
    renamed into place: a reader (another process) sees the old file or the
    whole new one, and two writers never interleave (the last rename wins).
    Creates the folder; raises ``OSError`` as ``open`` does."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", suffix=path.suffix, dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
