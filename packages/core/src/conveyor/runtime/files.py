"""Files that several processes share: the user's cache folders, writes that
a concurrent reader never sees half done, and the rule that decides which
cache folders and entries may be loaded at all.

Note [Caches only the user can write]: loading a cache entry runs code (the
compile cache's entries are pickles, the triton backend's kernels are
imported Python files), so whoever can write a cache folder can run code in
every process that loads from it: ``CONVEYOR_CACHE_DIR=/tmp/conveyor`` on a
shared machine would be such a hole. The rule, ssh's for its keys:

* the caches create their folders with mode 0700 (every missing folder on
  the way, not only the last one) and write their entries with mode 0600
  (``tempfile.mkstemp``, renamed into place by :func:`write_atomic`);
* an entry is loaded only when the cache root, every folder from the root
  down to the entry, and the entry itself are owned by the current user and
  writable by neither group nor others (:func:`untrusted`). An entry that is
  a symbolic link is refused (the folders may be links: a user may move
  ``~/.cache`` to another disk; the link's target is what is checked). The
  folders above the root are the user's business, as ssh leaves ``/home``;
* nothing is written into a folder that fails the rule either: a pickle
  written there could be swapped by its other writers before it is loaded.
  The writer creates the missing folders first and checks them after, so a
  folder someone else made in between is seen;
* a refused folder or entry gets one warning naming it
  (:class:`UntrustedCacheWarning`, once per path per process) and the
  program compiles without that cache: the compile cache neither loads nor
  stores there, the kernel cache writes its kernels to a private temporary
  folder of this process. A refused entry in folders that pass is replaced
  by the new one (the rename replaces a link, it does not follow it).

Where ``os.getuid`` does not exist (Windows) nothing is checked: there is no
owner to compare, and ``os.stat`` reports every folder as mode 0777 there.
"""

from __future__ import annotations

import os
import stat
import tempfile
import warnings
from pathlib import Path

_warned: set[str] = set()  # paths refused in this process (one warning each)


class UntrustedCacheWarning(UserWarning):
    """A cache folder or entry is not used (Note [Caches only the user can write])."""


def user_cache_dir(*parts: str) -> Path:
    """``$XDG_CACHE_HOME/conveyor/<parts>``, else ``~/.cache/conveyor/<parts>``."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base, "conveyor", *parts)


def untrusted(path: Path, *, folder: bool) -> str | None:
    """Why ``path`` must not be loaded from or written into, or ``None`` when
    it may (Note [Caches only the user can write]). A path that does not
    exist or cannot be looked at is not refused here: reading or writing it
    fails on its own. ``folder``: follow a symbolic link (an entry that is a
    link is refused)."""
    getuid = getattr(os, "getuid", None)
    if getuid is None:
        return None
    try:
        st = os.stat(path) if folder else os.lstat(path)
    except OSError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return "it is a symbolic link"
    if st.st_uid != getuid():
        return f"it is owned by uid {st.st_uid}, not by you (uid {getuid()})"
    if st.st_mode & 0o022:
        return f"group or others can write it (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def first_untrusted(root: Path, entry: Path, *, with_entry: bool) -> tuple[Path, str] | None:
    """The first of ``root`` and the folders below it down to ``entry`` (and
    ``entry`` itself when ``with_entry``) that :func:`untrusted` refuses,
    with the reason; ``None`` when all may be used."""
    for folder in _folders(root, entry):
        why = untrusted(folder, folder=True)
        if why is not None:
            return folder, why
    why = untrusted(entry, folder=False) if with_entry else None
    return (entry, why) if why is not None else None


def may_read(root: Path, entry: Path, what: str) -> bool:
    """Whether ``entry`` of the cache at ``root`` may be loaded (Note [Caches
    only the user can write]); warns once per refused path. ``what`` names
    the cache in the warning."""
    refused = first_untrusted(root, entry, with_entry=True)
    return refused is None or _refuse(*refused, what)


def may_write(root: Path, entry: Path, what: str) -> bool:
    """Whether ``entry`` of the cache at ``root`` may be written (its folders
    are checked, not the entry: it is replaced, never opened); warns once per
    refused path. Makes the missing folders (mode 0700) from the top down,
    each checked before a folder is made in it."""
    for folder in _folders(root, entry):
        try:
            make_private_dirs(folder)
        except OSError:
            return True  # the write fails and says why
        why = untrusted(folder, folder=True)
        if why is not None:
            return _refuse(folder, why, what)
    return True


def make_private_dirs(folder: Path) -> None:
    """Create ``folder`` and each missing folder above it with mode 0700
    (``os.makedirs`` gives the folders above the default mode)."""
    missing = []
    while not folder.exists() and folder.parent != folder:
        missing.append(folder)
        folder = folder.parent
    for path in reversed(missing):
        try:
            path.mkdir(mode=0o700)
        except FileExistsError:  # made meanwhile: the trust check looks at it
            pass


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` through a temporary file in the same folder,
    renamed into place: a reader (another process) sees the old file or the
    whole new one, and two writers never interleave (the last rename wins).
    The file is mode 0600 (``mkstemp``'s); missing folders are made 0700
    (Note [Caches only the user can write]). Raises ``OSError`` as ``open``
    does."""
    make_private_dirs(path.parent)
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


def _folders(root: Path, entry: Path) -> list[Path]:
    """``root`` and each folder below it down to ``entry``'s."""
    folders = [root]
    for part in entry.relative_to(root).parts[:-1]:
        folders.append(folders[-1] / part)
    return folders


def _refuse(path: Path, why: str, what: str) -> bool:
    """``False``, with one warning per ``path`` in this process."""
    if str(path) not in _warned:
        _warned.add(str(path))
        warnings.warn(
            f"conveyor: the {what} at {path} is not used: {why}. Only folders and files that you own and that "
            "group and others cannot write are loaded from or written to (Note [Caches only the user can write]); "
            "compiling without it.",
            UntrustedCacheWarning,
            stacklevel=4,
        )
    return False
