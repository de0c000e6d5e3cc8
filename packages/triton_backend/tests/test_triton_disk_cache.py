"""The backend's compiled program survives the persistent compile cache:
its kernels are loaded again from their stored source. The kernel cache
imports only from folders the user alone can write."""

from __future__ import annotations

import builtins
import os
import stat
import warnings
from pathlib import Path

import pytest
import torch
from conveyor.runtime import files
from conveyor.testing import check
from conveyor.testing.round_trip import check_round_trip
from conveyor_triton import kernel_cache, reports


def fused(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    y = (a * b).relu()
    return y.sum(-1) + a.mean(), y.t()  # a reduction, a pointwise kernel, a view of a kernel's result


def test_a_loaded_program_runs_its_kernels(tmp_path: Path) -> None:
    a, b = torch.randn(8, 16), torch.randn(8, 16)
    checked = check_round_trip(fused, a, b, folder=tmp_path, backend="triton")
    assert any(r.kernels for r in reports(checked.compiled)), "the loaded program runs no kernel"


# -- Note [Caches only the user can write] (conveyor.runtime.files) --------------------------------
FLAG = "conveyor_planted_kernel_ran"


def kernel(name: str) -> str:
    return f"import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef {name}(x):\n    pass\n"


def mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


def load(source: str, name: str, folder: Path) -> tuple[Path, list[str]]:
    """Where ``kernel_cache`` imported ``name`` from, and the cache warnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn, where = kernel_cache.load(source, name, folder)
    assert fn.__name__ == name and where.read_text() == source
    return where, [str(w.message) for w in caught if issubclass(w.category, files.UntrustedCacheWarning)]


def test_fresh_kernel_folders_are_0700_and_kernels_0600(tmp_path: Path) -> None:
    folder = tmp_path / "made" / "kernels"
    saved = os.umask(0)
    try:
        where, warned = load(kernel("k_fresh"), "k_fresh", folder)
    finally:
        os.umask(saved)
    assert warned == [] and where.parent.parent == folder
    assert [mode(p) for p in (tmp_path / "made", folder, where.parent)] == [0o700] * 3
    assert mode(where) == 0o600


@pytest.mark.parametrize("opened", ["root", "entry folder"])
def test_a_planted_kernel_in_an_open_folder_is_never_imported(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, opened: str
) -> None:
    monkeypatch.setattr(builtins, FLAG, False, raising=False)
    source = kernel("k_planted")
    planted = kernel_cache.path_for(tmp_path, kernel_cache.source_hash(source))
    planted.parent.mkdir()
    planted.write_text(f"import builtins\nbuiltins.{FLAG} = True\n{source}")
    folder = tmp_path if opened == "root" else planted.parent
    folder.chmod(0o777)
    where, (warned,) = load(source, "k_planted", tmp_path)
    assert not getattr(builtins, FLAG), "the planted kernel was imported"
    assert tmp_path not in where.parents, "the kernel was imported from the open folder"
    assert str(folder) in warned and "group or others can write it" in warned
    assert planted.read_text().startswith("import builtins"), "conveyor wrote into the open folder"


def test_a_kernel_folder_owned_by_another_user_is_refused_with_one_warning(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    me = os.getuid()
    monkeypatch.setattr(os, "getuid", lambda: me + 1)
    first, (warned,) = load(kernel("k_theirs"), "k_theirs", tmp_path)
    assert str(tmp_path) in warned and f"owned by uid {me}" in warned
    second, again = load(kernel("k_theirs_too"), "k_theirs_too", tmp_path)
    assert again == [], "warned again for the same folder"
    assert list(tmp_path.iterdir()) == [] and tmp_path not in first.parents and tmp_path not in second.parents


def test_a_group_writable_kernel_is_written_again(tmp_path: Path) -> None:
    source = kernel("k_open_file")
    path = kernel_cache.path_for(tmp_path, kernel_cache.source_hash(source))
    path.parent.mkdir(mode=0o700)
    path.write_text(source)
    path.chmod(0o664)
    where, (warned,) = load(source, "k_open_file", tmp_path)
    assert where == path and mode(path) == 0o600
    assert str(path) in warned and "mode 664" in warned


def test_a_program_whose_kernel_folder_is_open_compiles_without_it(tmp_path: Path, triton_only) -> None:  # type: ignore[no-untyped-def]
    tmp_path.chmod(0o777)
    a, b = torch.randn(8, 16), torch.randn(8, 16)
    with pytest.warns(files.UntrustedCacheWarning, match="triton kernel cache") as caught:
        check(fused, a, b, compile=triton_only(cache_dir=str(tmp_path)))
    assert len([w for w in caught if issubclass(w.category, files.UntrustedCacheWarning)]) == 1
    assert list(tmp_path.iterdir()) == []
