"""Stage implementations imported when the stage first runs (Note [Stage
implementations imported when they run] in ``conveyor.protocol.lazy``)."""

import subprocess
import sys
import textwrap

import conveyor
import pytest
import torch
from conveyor import PipelineError, Plugins, StageError, StageSpec
from conveyor.stage_api import LazyImpl
from conveyor.testing.pytest_plugin import pipeline_of, stage_plugin


@pytest.fixture
def impl_module(tmp_path, monkeypatch):
    """A module ``lazy_impl_mod`` whose ``Mark`` stage passes requests through
    and counts its instances; ``broken_impl_mod`` fails to import."""
    (tmp_path / "lazy_impl_mod.py").write_text(textwrap.dedent('''
        import conveyor

        made = []

        class Mark:
            def __init__(self):
                made.append(self)

            def lower(self, request, options):
                return conveyor.Lowering.passthrough(request)
    '''))
    (tmp_path / "broken_impl_mod.py").write_text("raise ImportError('boom')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield
    for name in ("lazy_impl_mod", "broken_impl_mod"):
        sys.modules.pop(name, None)


def _compiled(fn, spec):
    plugins = Plugins()
    plugins.register(stage_plugin(spec), name="stages")
    return conveyor.compile(fn, plugins=plugins, autoload=False, cache=False)


def test_the_implementation_is_imported_on_the_stage_first_run(impl_module):
    compiled = _compiled(lambda x: x.sin() + 1, StageSpec(name="marker", kind="wrapper", impl=LazyImpl("lazy_impl_mod", "Mark")))
    assert [s.name for s in compiled.pipeline.stages] == ["marker", "eager"]
    assert "lazy_impl_mod" not in sys.modules  # built, not imported
    x = torch.randn(3)
    torch.testing.assert_close(compiled(x), x.sin() + 1)
    torch.testing.assert_close(compiled(x * 2), (x * 2).sin() + 1)
    assert len(sys.modules["lazy_impl_mod"].made) == 1  # made once


def test_a_misspelt_implementation_module_fails_the_build_naming_the_plugin(impl_module):
    spec = StageSpec(name="marker", kind="wrapper", impl=LazyImpl("lazy_impl_mod_typo", "Mark"))
    with pytest.raises(PipelineError, match=r"plugin 'stages': stage 'marker'.*lazy_impl_mod_typo\.Mark cannot be found"):
        pipeline_of(spec)


def test_an_implementation_that_fails_to_import_fails_its_stage(impl_module):
    compiled = _compiled(lambda x: x.sin(), StageSpec(name="marker", kind="wrapper", impl=LazyImpl("broken_impl_mod", "Mark")))
    with pytest.raises(StageError, match=r"marker.*boom"):
        compiled(torch.randn(3))


def test_registering_the_installed_stages_imports_no_implementation():
    """A pipeline of every installed stage, built in a fresh process,
    imports no stage's implementation (a program loaded from the disk cache
    runs none)."""
    code = textwrap.dedent('''
        import sys
        from conveyor import Pipeline, resolve
        Pipeline(resolve({"backend": "eager"}))
        implementations = ["conveyor.protocol.backends.eager", "conveyor_autograd.stage", "conveyor_autograd.joint",
                           "conveyor_dedupe.stage", "conveyor_functionalize.stage", "conveyor_functionalize.trace",
                           "conveyor_synthetic_base.stage", "conveyor_inductor.backend", "conveyor_triton.backend"]
        print(sorted(m for m in implementations if m in sys.modules))
    ''')
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_package_name_that_is_also_its_submodule_stays_the_function():
    """Note [A name that is also a submodule]: ``conveyor_autograd.min_cut``
    is the function, also once its module is imported."""
    pytest.importorskip("conveyor_autograd")
    import conveyor_autograd
    import conveyor_autograd.min_cut as module

    assert conveyor_autograd.min_cut is sys.modules["conveyor_autograd.min_cut"].min_cut
    assert callable(conveyor_autograd.min_cut) and module is not None
