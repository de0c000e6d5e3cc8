"""Tools: packages that are not compile-time stages, declared through
``conveyor_register_tools`` (Note [Tools beside the stages] in
``conveyor.protocol.tool``)."""

from __future__ import annotations

import sys
import textwrap
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import conveyor
import pytest
from conveyor import ConfigError, Lowering, PipelineError, Plugins, Request, StageSpec, hookimpl
from conveyor.cli import main
from conveyor.stage_api import ToolSpec


class _Tools:
    def __init__(self, *specs: ToolSpec) -> None:
        self.specs = specs

    @hookimpl
    def conveyor_register_tools(self, register: Callable[[ToolSpec], None]) -> None:
        for spec in self.specs:
            register(spec)


def _plugins(*specs: ToolSpec, stages: tuple[StageSpec, ...] = ()) -> Plugins:
    class Stages:
        @hookimpl
        def conveyor_register_stages(self, register: Callable[[StageSpec], None]) -> None:
            for spec in stages:
                register(spec)

    plugins = Plugins()
    plugins.register(_Tools(*specs), name="tools")
    plugins.register(Stages(), name="stages")
    return plugins


TRACER = ToolSpec(name="tracer", description="traces at run time", usage="with tracer.on(): ...", options={"depth": 1})


def _pipeline(plugins: Plugins, **config: Any) -> conveyor.Pipeline:
    return conveyor.Pipeline(conveyor.resolve({"autoload": False, **config}), plugins)


def test_a_tool_is_listed_and_its_options_resolved_but_it_is_no_stage() -> None:
    pipeline = _pipeline(_plugins(TRACER), stages={"tracer": {"depth": 3}})
    assert list(pipeline.tools) == ["tracer"] and pipeline.tools["tracer"].spec is TRACER
    assert pipeline.tool_options == {"tracer": {"depth": 3}}
    assert [s.name for s in pipeline.stages] == ["eager"]
    assert _pipeline(_plugins(TRACER)).tool_options == {"tracer": {"depth": 1}}  # the defaults


def test_a_tool_option_it_does_not_declare_is_an_error() -> None:
    with pytest.raises(ConfigError, match=r"tool 'tracer': unknown option\(s\) \['width'\]; valid options are \['depth'\]"):
        _pipeline(_plugins(TRACER), stages={"tracer": {"width": 2}})


def test_an_option_table_for_neither_a_stage_nor_a_tool_lists_both() -> None:
    with pytest.raises(ConfigError, match=r"unknown stage\(s\) \['nope'\]; installed stages are \['eager'\] and tools \['tracer'\]"):
        _pipeline(_plugins(TRACER), stages={"nope": {}})


@pytest.mark.parametrize("key", ["enable", "disable"])
def test_enabling_or_disabling_a_tool_says_how_it_is_used(key: str) -> None:
    with pytest.raises(ConfigError, match=rf"config '{key}'.*: 'tracer' is a tool, not a stage .* `with tracer.on\(\): ...`"):
        _pipeline(_plugins(TRACER), **{key: ["tracer"]})


class _Pass:
    def lower(self, request: Request, options: Any) -> Lowering:
        return Lowering.passthrough(request)


def test_a_tool_named_like_a_stage_or_another_tool_is_an_error() -> None:
    stage = StageSpec(name="tracer", kind="wrapper", impl=_Pass())
    with pytest.raises(PipelineError, match="'tracer' is registered as a stage by 'stages' and as a tool by 'tools'"):
        _pipeline(_plugins(TRACER, stages=(stage,)))
    plugins = _plugins(TRACER)
    plugins.register(_Tools(TRACER), name="again")
    with pytest.raises(PipelineError, match="tool 'tracer' is registered twice: by 'tools' and by 'again'"):
        plugins.tools()


def test_a_tool_declares_a_name_and_how_it_is_used() -> None:
    with pytest.raises(ValueError, match="must be a non-empty identifier"):
        ToolSpec(name="a tool", description="", usage="x")
    with pytest.raises(ValueError, match="say how it is used"):
        ToolSpec(name="tool", description="", usage="")
    with pytest.raises(PipelineError, match="registered 'x', not a ToolSpec"):
        _plugins("x").tools()  # type: ignore[arg-type]


@pytest.fixture
def installed_tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """A distribution whose entry point declares a tool and nothing else."""
    (tmp_path / "conveyor_testtool.py").write_text(textwrap.dedent('''
        import conveyor
        from conveyor.stage_api import ToolSpec

        @conveyor.hookimpl
        def conveyor_register_tools(register):
            register(ToolSpec(name="testtool", description="a test tool", usage="with testtool.on(): ...",
                              options={"level": 2}))
    '''))
    dist = tmp_path / "conveyor_testtool-4.5.6.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: conveyor-testtool\nVersion: 4.5.6\n")
    (dist / "entry_points.txt").write_text("[conveyor]\ntesttool = conveyor_testtool\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setenv("CONVEYOR_AUTOLOAD", "1")
    monkeypatch.setenv("CONVEYOR_PLUGINS", "testtool")
    yield
    sys.modules.pop("conveyor_testtool", None)


def test_conveyor_stages_lists_a_tool_with_its_distribution_usage_and_options(
    installed_tool: None, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["stages"]) == 0
    out = capsys.readouterr().out
    row = next(line for line in out.splitlines() if " testtool " in line)
    assert "tool" in row and "conveyor-testtool 4.5.6" in row and "a test tool" in row
    assert "  testtool: `with testtool.on(): ...`; options level=2" in out
    assert "pipeline: eager" in out
