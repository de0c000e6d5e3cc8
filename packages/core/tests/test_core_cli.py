import argparse
import json
import os
import subprocess
import sys
import textwrap

import pytest
from conveyor import cli
from conveyor.cli import main


def test_stages_lists_order_and_distribution(capsys):
    assert main(["stages"]) == 0
    out = capsys.readouterr().out
    assert "eager" in out and "conveyor-core" in out and "pipeline:" in out
    assert "declared" in out and "eager: nothing" in out


def test_unknown_backend_is_a_readable_error(capsys):
    assert main(["stages", "--backend", "nope"]) == 2
    assert "unknown backend 'nope'" in capsys.readouterr().err


def test_demo_trains_and_matches(capsys):
    assert main(["demo", "--steps", "2"]) == 0
    out = capsys.readouterr().out
    assert "OK: largest loss difference" in out and "per-stage report" in out


# ---- conveyor --version, stages --json, --help (issue 23)

SHIPPED_PIPELINE = ["dedupe", "synthetic_base", "functionalize", "autograd", "eager"]
STAGE_FIELDS = {
    "name", "kind", "description", "plugin", "distribution", "version", "position", "enabled", "why",
    "after", "before", "requires", "reads", "default_for", "fuses_pointwise", "options", "resolved",
}
TOOL_FIELDS = {"name", "description", "plugin", "distribution", "version", "usage", "options", "resolved"}


@pytest.fixture
def everything_installed(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    """Every stage package of the project loads (the suite's CONVEYOR_PLUGINS:
    Note [Tests isolated from installed plugins]), and no pyproject.toml of
    the checkout configures them."""
    monkeypatch.setenv("CONVEYOR_AUTOLOAD", "1")
    for var in ("CONVEYOR_BACKEND", "CONVEYOR_ENABLE", "CONVEYOR_DISABLE", "CONVEYOR_BLOCK_PLUGINS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.chdir(tmp_path)


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CONVEYOR_AUTOLOAD": "1", "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-m", "conveyor", *args], capture_output=True, text=True, timeout=300, env=env)


def _stages_json(capsys: pytest.CaptureFixture[str], *args: str) -> dict:
    assert main(["stages", "--json", *args]) == 0
    return json.loads(capsys.readouterr().out)


def test_version_names_core_the_stage_packages_and_torch(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--version"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == f"conveyor-core {cli.__version__}"
    names = [line.split()[0] for line in lines]
    assert "torch" in names and "conveyor-autograd" in names and "conveyor-compiled-autograd" in names
    assert len(names) == len(set(names))


def test_version_from_python_dash_m() -> None:
    done = _run("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("conveyor-core ") and "\ntorch " in done.stdout


def test_stages_json_lists_every_shipped_stage_in_order_and_the_tool(
    everything_installed: None, capsys: pytest.CaptureFixture[str]
) -> None:
    report = _stages_json(capsys)
    assert report["pipeline"] == SHIPPED_PIPELINE and report["backend"] == "eager"
    stages = report["stages"]
    names = [s["name"] for s in stages]  # the pipeline, then the project's other stages by name
    assert names[:5] == SHIPPED_PIPELINE and names[5:] == sorted(names[5:]) and "triton" in names[5:]
    assert all(set(s) == STAGE_FIELDS for s in stages)
    assert [s["position"] for s in stages] == [1, 2, 3, 4, 5] + [None] * (len(names) - 5)
    by_name = {s["name"]: s for s in stages}
    assert by_name["autograd"]["distribution"] == "conveyor-autograd" and by_name["autograd"]["after"] == ["functionalize"]
    assert by_name["autograd"]["options"] == by_name["autograd"]["resolved"] == {"partitioner": "auto"}
    assert by_name["eager"]["why"] == "default backend" and by_name["eager"]["distribution"] == "conveyor-core"
    assert by_name["triton"]["enabled"] is False and by_name["triton"]["default_for"] == ["cuda"]
    assert by_name["triton"]["fuses_pointwise"] is True and by_name["eager"]["fuses_pointwise"] is False
    assert by_name["triton"]["resolved"] is None and by_name["triton"]["options"]["cache_dir"] is None
    (tool,) = report["tools"]
    assert set(tool) == TOOL_FIELDS and tool["name"] == "compiled_autograd"
    assert tool["distribution"] == "conveyor-compiled-autograd" and tool["options"] == {"inline": True}
    assert "enable()" in tool["usage"]


def test_stages_json_follows_the_config_sources(
    everything_installed: None, tmp_path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "pyproject.toml").write_text(textwrap.dedent("""
        [tool.conveyor]
        disable = ["dedupe"]
        [tool.conveyor.stages.autograd]
        partitioner = "save_eager"
        [tool.conveyor.stages.compiled_autograd]
        inline = false
    """))
    monkeypatch.setenv("CONVEYOR_BACKEND", "triton")
    report = _stages_json(capsys)
    by_name = {s["name"]: s for s in report["stages"]}
    assert report["pipeline"] == ["synthetic_base", "functionalize", "autograd", "triton"]
    assert by_name["dedupe"]["enabled"] is False and by_name["dedupe"]["why"] == "disabled by config"
    assert by_name["triton"]["why"] == "backend chosen by config" and by_name["eager"]["why"] == "backend not chosen"
    assert by_name["autograd"]["resolved"] == {"partitioner": "save_eager"}
    assert by_name["autograd"]["options"] == {"partitioner": "auto"}
    assert report["tools"][0]["resolved"] == {"inline": False}
    assert main(["stages"]) == 0
    assert "options partitioner='save_eager' (default 'auto')" in capsys.readouterr().out
    assert _stages_json(capsys, "--backend", "eager")["pipeline"][-1] == "eager"


def test_stages_json_agrees_with_the_text(everything_installed: None, capsys: pytest.CaptureFixture[str]) -> None:
    report = _stages_json(capsys)
    assert main(["stages"]) == 0
    text = capsys.readouterr().out
    table = text.split("\n\n")[0].splitlines()[1:]
    rows = [line.split() for line in table]
    assert [r[1] for r in rows] == [s["name"] for s in report["stages"]] + [t["name"] for t in report["tools"]]
    assert [r[0] != "-" for r in rows[: len(report["stages"])]] == [s["enabled"] for s in report["stages"]]
    assert text.rstrip().endswith("pipeline: " + " -> ".join(report["pipeline"]))


def test_stages_json_from_python_dash_m() -> None:
    done = _run("stages", "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert [s["name"] for s in report["stages"] if s["enabled"]] == report["pipeline"]
    assert "compiled_autograd" in [t["name"] for t in report["tools"]]


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    (sub,) = [a for a in cli.build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


@pytest.mark.parametrize("command", [[], *([name] for name in _subcommands())])
def test_every_subcommand_has_help_documenting_its_options(command: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*command, "--help"]) == 0
    out = capsys.readouterr().out
    parser = _subcommands()[command[0]] if command else cli.build_parser()
    assert parser.description and parser.description.split()[0] in out
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            assert all(c.help for c in action._choices_actions)
            continue
        assert action.help, f"{command} {action.option_strings} has no help"
        assert all(opt in out for opt in action.option_strings)


def test_help_from_python_dash_m() -> None:
    done = _run("demo", "--help")
    assert done.returncode == 0 and "--steps N" in done.stdout and "training steps" in done.stdout


def test_a_usage_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stages", "--no-such-option"]) == 2
    assert "unrecognized arguments" in capsys.readouterr().err

# Note [Tests run once in CI]: this module checks machinery that is the same on every torch;
# .ci/run's second torch leaves it out (-m "not once")
pytestmark = pytest.mark.once
