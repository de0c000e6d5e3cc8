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


#: the core's layers, lowest first: a module imports only from its own layer or below
LAYERS = ("errors", "analysis", "protocol", "frontend", "runtime")
CORE = ROOT / "packages" / "core" / "src" / "conveyor"


def _layer(module: str) -> int:
    """The rank of ``conveyor.<layer>...`` (the entries above every layer: len(LAYERS))."""
    parts = module.split(".")
    return LAYERS.index(parts[1]) if len(parts) > 1 and parts[1] in LAYERS else len(LAYERS)


def _imported(tree: ast.AST) -> list[str]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "conveyor":
            if node.module == "conveyor":
                found += [f"conveyor.{a.name}" for a in node.names]
            else:
                found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [a.name for a in node.names if a.name.split(".")[0] == "conveyor"]
    return found


@pytest.mark.parametrize("layer", LAYERS[1:])
def test_the_core_layers_import_only_downwards(layer: str) -> None:
    """errors <- analysis <- protocol <- frontend <- runtime <- the entries
    (``compile``, ``dynamo``, ``cli``, ``stage_api``): one direction."""
    rank = LAYERS.index(layer)
    bad = [
        f"{path.relative_to(CORE)} imports {module}"
        for path in sorted((CORE / layer).rglob("*.py"))
        for module in _imported(ast.parse(path.read_text()))
        if _layer(module) > rank
    ]
    assert not bad, "\n".join(bad)


def test_the_core_top_folder_is_small() -> None:
    assert len(list(CORE.glob("*.py"))) <= 12
