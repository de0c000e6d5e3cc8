"""The compile cache loads from and writes to folders only the user can write
(Note [Caches only the user can write] in conveyor.runtime.files): a planted entry in
an open folder, a folder of another user, an open or linked entry file."""

from __future__ import annotations

import builtins
import hashlib
import os
import pickle
import stat
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import conveyor
import pytest
import torch
from conveyor.protocol.pipeline import Pipeline
from conveyor.protocol.stage import Request
from conveyor.runtime import disk_cache, disk_key, files

FLAG = "conveyor_planted_entry_ran"


class Runs:
    """Counts pipeline runs (a disk hit runs none)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        original = Pipeline.compile

        def counting(pipeline: Pipeline, request: Request) -> Any:
            self.count += 1
            return original(pipeline, request)

        monkeypatch.setattr(Pipeline, "compile", counting)


@pytest.fixture
def runs(monkeypatch: pytest.MonkeyPatch) -> Runs:
    return Runs(monkeypatch)


@pytest.fixture
def planted_ran(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``builtins.<FLAG>`` is set by a planted entry that is unpickled."""
    monkeypatch.setattr(builtins, FLAG, False, raising=False)
    yield


class _Planted:
    """Unpickling this runs code: what another user could put in a cache."""

    def __reduce__(self) -> tuple[Any, ...]:
        return exec, (f"import builtins; builtins.{FLAG} = True",)


def ran() -> bool:
    return bool(getattr(builtins, FLAG))


def fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a * b).sin() + a


def other_fn(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return (a * b).cos() - a


def inputs() -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(0)
    return torch.randn(4, 5), torch.randn(4, 5)


def run(f: Any, folder: Path) -> list[str]:
    """Compile ``f`` with the cache in ``folder``, check one call against
    eager; the cache warnings it gave."""
    a, b = inputs()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = conveyor.compile(f, cache=True, cache_dir=str(folder))(a, b)
    torch.testing.assert_close(out, f(a, b))
    return [str(w.message) for w in caught if issubclass(w.category, files.UntrustedCacheWarning)]


def entry(folder: Path) -> Path:
    (path,) = folder.glob("*/*.program")
    return path


def plant(path: Path, key: str | None = None) -> bytes:
    """Overwrite the entry at ``path`` with one that passes every check but
    the folder's: right magic, version, key (``path``'s unless given) and
    checksum, a payload whose unpickling sets the flag."""
    payload = pickle.dumps(_Planted())
    version = disk_key.FORMAT_VERSION.to_bytes(4, "little")
    key_bytes = bytes.fromhex(key or path.stem)
    data = disk_cache._MAGIC + version + key_bytes + hashlib.sha256(payload).digest() + payload
    path.write_bytes(data)
    return data


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


# -- what conveyor makes --------------------------------------------------------------
def test_fresh_folders_are_0700_and_entries_0600_whatever_the_umask(tmp_path: Path, runs: Runs) -> None:
    root = tmp_path / "made" / "programs"
    saved = os.umask(0)
    try:
        assert run(fn, root) == []
    finally:
        os.umask(saved)
    path = entry(root)
    assert [mode(p) for p in (tmp_path / "made", root, path.parent)] == [0o700] * 3
    assert mode(path) == 0o600
    assert run(fn, root) == [] and runs.count == 1, "a private folder's entry was not loaded"


# -- what is refused -------------------------------------------------------------------
@pytest.mark.parametrize("opened", ["root", "entry folder"])
@pytest.mark.parametrize("bits", [0o020, 0o002], ids=["group", "others"])
def test_a_planted_entry_in_an_open_folder_is_never_unpickled(
    tmp_path: Path, runs: Runs, planted_ran: None, opened: str, bits: int
) -> None:
    assert run(fn, tmp_path) == []
    path = entry(tmp_path)
    planted = plant(path)
    folder = tmp_path if opened == "root" else path.parent
    folder.chmod(0o700 | bits)
    (warned,) = run(fn, tmp_path)
    assert not ran(), "the planted entry was unpickled"
    assert runs.count == 2, "the program did not compile again"
    assert str(folder) in warned and "group or others can write it" in warned
    assert path.read_bytes() == planted, "conveyor wrote into the open folder"


def test_the_same_planted_entry_in_a_private_folder_would_run(tmp_path: Path, runs: Runs, planted_ran: None) -> None:
    """The control for the test above: the plant is a real attack."""
    run(fn, tmp_path)
    plant(entry(tmp_path))
    assert run(fn, tmp_path) == []
    assert ran() and runs.count == 2  # unpickled, then found not to be a program and rebuilt


def test_a_folder_owned_by_another_user_is_refused_with_one_warning(
    tmp_path: Path, runs: Runs, planted_ran: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    run(fn, tmp_path)
    planted = plant(entry(tmp_path))
    me = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: me + 1)
    (warned,) = run(fn, tmp_path)
    assert not ran() and runs.count == 2
    assert str(tmp_path) in warned and f"owned by uid {me}, not by you (uid {me + 1})" in warned
    assert run(fn, tmp_path) == [] and run(other_fn, tmp_path) == [], "warned again for the same folder"
    assert runs.count == 4 and entry(tmp_path).read_bytes() == planted, "loaded from or wrote into the folder"


def test_a_group_writable_entry_is_refused_then_replaced(tmp_path: Path, runs: Runs, planted_ran: None) -> None:
    run(fn, tmp_path)
    path = entry(tmp_path)
    plant(path)
    path.chmod(0o620)
    (warned,) = run(fn, tmp_path)
    assert not ran() and runs.count == 2
    assert str(path) in warned and "mode 620" in warned
    assert mode(path) == 0o600, "the fresh program did not replace the refused entry"
    assert run(fn, tmp_path) == [] and runs.count == 2, "the replaced entry was not loaded"


def test_an_entry_that_is_a_symbolic_link_is_refused(tmp_path: Path, runs: Runs, planted_ran: None) -> None:
    cache = tmp_path / "cache"
    run(fn, cache)
    path = entry(cache)
    target = tmp_path / "elsewhere.program"
    planted = plant(target, key=path.stem)
    target.chmod(0o600)
    path.unlink()
    path.symlink_to(target)
    (warned,) = run(fn, cache)
    assert not ran() and runs.count == 2
    assert str(path) in warned and "symbolic link" in warned
    assert not path.is_symlink() and target.read_bytes() == planted, "the link was followed"


def test_nothing_is_written_into_an_open_folder(tmp_path: Path, runs: Runs) -> None:
    tmp_path.chmod(0o777)
    (warned,) = run(fn, tmp_path)
    assert str(tmp_path) in warned
    assert list(tmp_path.iterdir()) == [], "a folder or entry was made in the open folder"


def test_without_getuid_nothing_is_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tmp_path.chmod(0o777)
    assert files.untrusted(tmp_path, folder=True) is not None
    monkeypatch.delattr(os, "getuid")
    assert files.untrusted(tmp_path, folder=True) is None
