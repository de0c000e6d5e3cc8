"""The suite's pipelines come from the project's own plugins, whatever else
is installed (Note [Tests isolated from installed plugins] in
``conveyor.testing.pytest_plugin``); in normal use a broken plugin names its
entry point and how to block it."""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import conveyor
import pytest
from conveyor import PipelineError
from conveyor.protocol.config import resolve
from conveyor.protocol.pipeline import Pipeline
from conveyor.testing.pytest_plugin import project_plugins

ROOT = Path(__file__).resolve().parents[3]
SHIPPED_PIPELINE = ["dedupe", "synthetic_base", "functionalize", "autograd", "eager"]

#: a test file run by a pytest subprocess with the root's configuration
SUITE_TEST = textwrap.dedent('''
    import importlib.metadata

    import conveyor
    import torch

    def test_the_intruders_are_installed():
        names = {ep.name for ep in importlib.metadata.entry_points(group="conveyor")}
        assert {"intruder", "broken"} <= names

    def test_pipelines_are_the_projects(installed_plugins):
        c = conveyor.compile(lambda x: x * 2, cache=False)
        assert [s.name for s in c.pipeline.stages] == SHIPPED_PIPELINE
        torch.testing.assert_close(c(torch.ones(2)), torch.full((2,), 2.0))
        assert not {"intruder", "broken"} & {n for n, _ in installed_plugins.manager.list_name_plugin()}
        g = torch.compile(lambda x: x + 1, backend="conveyor")
        torch.testing.assert_close(g(torch.ones(2)), torch.full((2,), 2.0))
''').replace("SHIPPED_PIPELINE", repr(SHIPPED_PIPELINE))


@pytest.fixture
def intruders(tmp_path):
    """A folder holding an installed distribution (dist-info, as pip leaves
    one) with two conveyor plugins: ``intruder``, a wrapper stage on by
    default that fails every compile, and ``broken``, which fails to import."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "conveyor_intruder.py").write_text(textwrap.dedent('''
        import conveyor

        class Intrude:
            def lower(self, request, options):
                raise RuntimeError("the intruder stage ran")

        @conveyor.hookimpl
        def conveyor_register_stages(register):
            register(conveyor.StageSpec(name="intruder", kind="wrapper", impl=Intrude(), after=("functionalize",)))
    '''))
    (site / "broken_intruder.py").write_text("raise ImportError('boom')\n")
    dist = site / "conveyor_intruder-9.9.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: conveyor-intruder\nVersion: 9.9\n")
    (dist / "entry_points.txt").write_text("[conveyor]\nintruder = conveyor_intruder\nbroken = broken_intruder\n")
    yield site
    for name in ("conveyor_intruder", "broken_intruder"):
        sys.modules.pop(name, None)


def test_a_broken_plugin_names_its_entry_point_and_how_to_block_it(intruders, monkeypatch):
    monkeypatch.syspath_prepend(str(intruders))
    monkeypatch.setenv("CONVEYOR_AUTOLOAD", "1")
    monkeypatch.delenv("CONVEYOR_PLUGINS", raising=False)  # normal use: no allow-list
    with pytest.raises(PipelineError) as raised:
        Pipeline(resolve())
    assert str(raised.value).startswith(
        "plugin 'broken' (broken_intruder, from conveyor-intruder 9.9) failed to load: ImportError('boom'); "
        "to build pipelines without it, set CONVEYOR_BLOCK_PLUGINS=broken"
    )
    monkeypatch.setenv("CONVEYOR_BLOCK_PLUGINS", "broken")
    assert "intruder" in [s.name for s in Pipeline(resolve()).stages]  # what the suite would have compiled with


def test_a_plugin_whose_hook_raises_is_named_too(tmp_path, monkeypatch):
    (tmp_path / "raising_plugin.py").write_text(textwrap.dedent('''
        import conveyor

        @conveyor.hookimpl
        def conveyor_register_stages(register):
            raise KeyError("oops")
    '''))
    dist = tmp_path / "raising_plugin-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: raising-plugin\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text("[conveyor]\nraising = raising_plugin\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with pytest.raises(PipelineError, match=r"plugin 'raising' failed in conveyor_register_stages: KeyError\('oops'\); "
                           r"to build pipelines without it, set CONVEYOR_BLOCK_PLUGINS=raising"):
            Pipeline(conveyor.Config(plugins=("raising",)))
    finally:
        sys.modules.pop("raising_plugin", None)


def test_the_projects_plugins_are_read_from_its_pyproject_files():
    names = project_plugins(ROOT, ["packages/*/pyproject.toml"])
    assert {"dedupe", "synthetic_base", "functionalize", "autograd", "triton", "compiled_autograd"} <= set(names)
    assert os.environ["CONVEYOR_PLUGINS"] == ",".join(names)  # what this run's plugin set


def _pytest(site: Path, tests: list[str], *options: str) -> subprocess.CompletedProcess[str]:
    """pytest with the repository's configuration, the intruders installed
    (on ``PYTHONPATH``), and no allow-list or autoload switch inherited from this run."""
    env = {k: v for k, v in os.environ.items() if k not in ("CONVEYOR_PLUGINS", "CONVEYOR_BLOCK_PLUGINS", "CONVEYOR_AUTOLOAD")}
    env["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [os.environ.get("PYTHONPATH")])])
    env["OMP_NUM_THREADS"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-c", str(ROOT / "pyproject.toml"), "--rootdir", str(ROOT),
         "-p", "no:randomly", "-x", *options, *tests],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )


def test_the_suite_is_unchanged_by_installed_plugins(intruders, tmp_path):
    (tmp_path / "test_suite_pipelines.py").write_text(SUITE_TEST)
    real = "packages/core/tests/test_core_cli.py::test_stages_json_lists_every_shipped_stage_in_order_and_the_tool"
    done = _pytest(intruders, [str(tmp_path / "test_suite_pipelines.py"), real])
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "3 passed" in done.stdout
    # without the isolation, the same tests meet the broken plugin
    done = _pytest(intruders, [str(tmp_path / "test_suite_pipelines.py")], "-o", "conveyor_plugin_projects=")
    assert done.returncode == 1
    assert "plugin 'broken' (broken_intruder, from conveyor-intruder 9.9) failed to load" in done.stdout

# Note [Tests run once in CI]: this module checks machinery that is the same on every torch;
# .ci/run's second torch leaves it out (-m "not once")
pytestmark = pytest.mark.once
