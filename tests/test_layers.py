"""The layers of the code base (issue 21): a stage package uses the core only
through its declared stage API (core Note [The stage API]): ``conveyor``'s
public names and ``conveyor.stage_api``, never a core module directly."""

from __future__ import annotations

import ast
from pathlib import Path

import conveyor
import conveyor.stage_api
import pytest

ROOT = Path(__file__).parent.parent
STAGE_PACKAGES = sorted(p for p in (ROOT / "packages").iterdir() if p.is_dir() and p.name != "core")
ALLOWED = set(conveyor.__all__) | {"stage_api"}


def _core_uses(tree: ast.AST) -> list[str]:
    """What a module takes from the core, as ``module:name``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "conveyor":
            found += [f"{node.module}:{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            found += [f"{a.name}:" for a in node.names if a.name.split(".")[0] == "conveyor" and a.name != "conveyor"]
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "conveyor":
            found.append(f"conveyor:{node.attr}")
    return found


def _allowed(use: str) -> bool:
    module, _, name = use.partition(":")
    if module == "conveyor.stage_api":
        return name in conveyor.stage_api.__all__
    return module == "conveyor" and name in ALLOWED


@pytest.mark.parametrize("package", STAGE_PACKAGES, ids=lambda p: p.name)
def test_a_stage_package_uses_the_core_only_through_the_stage_api(package: Path) -> None:
    bad = [
        f"{path.relative_to(ROOT)}: {use}"
        for path in sorted((package / "src").rglob("*.py"))
        for use in _core_uses(ast.parse(path.read_text()))
        if not _allowed(use)
    ]
    assert not bad, "stage sources reaching past the stage API (core Note [The stage API]):\n" + "\n".join(bad)


def test_the_stage_api_names_exist() -> None:
    assert all(hasattr(conveyor.stage_api, name) for name in conveyor.stage_api.__all__)
