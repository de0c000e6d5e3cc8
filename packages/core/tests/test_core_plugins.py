"""Discovery through the ``conveyor`` entry-point group, of a real installed
distribution (a dist-info folder on sys.path, as pip leaves one)."""

import sys
import textwrap

import conveyor
import pytest
from conveyor import Config, PipelineError, Plugins
from conveyor.protocol.pipeline import Pipeline


@pytest.fixture
def installed_dist(tmp_path, monkeypatch):
    pkg = tmp_path / "conveyor_testplugin"
    pkg.mkdir()
    (pkg / "__init__.py").write_text(textwrap.dedent('''
        import conveyor

        class Mark:
            def lower(self, request, options):
                return conveyor.Lowering.passthrough(request)

        @conveyor.hookimpl
        def conveyor_register_stages(register):
            register(conveyor.StageSpec(name="marker", kind="wrapper", impl=Mark(),
                                        description="test plugin stage"))
    '''))
    (tmp_path / "broken_testplugin.py").write_text("raise ImportError('boom')\n")
    dist = tmp_path / "conveyor_testplugin-1.2.3.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: conveyor-testplugin\nVersion: 1.2.3\n")
    (dist / "entry_points.txt").write_text(
        "[conveyor]\nmarker = conveyor_testplugin\nbroken = broken_testplugin\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for name in ("conveyor_testplugin", "broken_testplugin"):
        sys.modules.pop(name, None)


def test_entry_point_plugin_is_discovered_with_its_version(installed_dist):
    plugins = Plugins()
    plugins.load_entry_points(allow=("marker", "broken"), block=("broken",))
    stage = plugins.stages()["marker"]
    assert (stage.distribution, stage.version) == ("conveyor-testplugin", "1.2.3")
    assert [s.name for s in Pipeline(Config(), plugins).stages] == ["marker", "eager"]


def test_allow_and_block_lists(installed_dist):
    plugins = Plugins()
    plugins.load_entry_points(allow=("nothing-else",))
    assert "marker" not in plugins.stages()
    plugins = Plugins()
    plugins.load_entry_points(allow=("marker", "broken"), block=("marker", "broken"))
    assert "marker" not in plugins.stages()


def test_broken_plugin_fails_loudly_at_build_time(installed_dist):
    with pytest.raises(PipelineError, match=r"plugin 'broken' \(broken_testplugin, from conveyor-testplugin 1.2.3\) failed to load: .*CONVEYOR_BLOCK_PLUGINS=broken"):
        Pipeline(Config(plugins=("marker", "broken"), block_plugins=("marker",)))


def test_autoload_off_leaves_only_builtin(installed_dist):
    pipeline = Pipeline(Config(autoload=False))
    assert list(pipeline.available) == ["eager"]


def test_misspelled_hookimpl_is_caught():
    class Bad:
        @conveyor.hookimpl
        def conveyor_register_stagez(self, register):
            pass

    with pytest.raises(Exception, match="conveyor_register_stagez"):
        Plugins().register(Bad(), name="bad")


def test_every_hook_is_documented():
    from conveyor.protocol import hookspecs

    for name in dir(hookspecs):
        if name.startswith("conveyor_"):
            doc = getattr(hookspecs, name).__doc__ or ""
            assert "Called by" in doc and ":return:" in doc, f"{name} is not fully documented"
            params = [p for p in getattr(hookspecs, name).__code__.co_varnames[: getattr(hookspecs, name).__code__.co_argcount]]
            for p in params:
                assert f":param {p}:" in doc, f"{name}: parameter {p} undocumented"
