import conveyor
import pytest
import torch
from conveyor import ConfigError, resolve
from conveyor.protocol.config import Config


def write_pyproject(tmp_path, body):
    (tmp_path / "pyproject.toml").write_text(body)
    sub = tmp_path / "deep" / "er"
    sub.mkdir(parents=True)
    return sub


def test_precedence_defaults_pyproject_env_arguments(tmp_path):
    start = write_pyproject(
        tmp_path,
        '[tool.conveyor]\nbackend = "from_file"\ndisable = ["a"]\n[tool.conveyor.stages.s]\nx = 1\ny = 1\n',
    )
    assert resolve(environ={}, start=tmp_path.parent / "nowhere").backend is None  # defaults
    c = resolve(environ={}, start=start)
    assert (c.backend, c.disable, c.stages["s"]) == ("from_file", ("a",), {"x": 1, "y": 1})
    c = resolve(environ={"CONVEYOR_BACKEND": "from_env", "CONVEYOR_DISABLE": "b, c"}, start=start)
    assert (c.backend, c.disable) == ("from_env", ("b", "c"))
    c = resolve({"backend": "from_args", "stages": {"s": {"y": 2}}}, environ={"CONVEYOR_BACKEND": "from_env"}, start=start)
    assert c.backend == "from_args"
    assert c.stages["s"] == {"x": 1, "y": 2}


def test_later_enable_overrides_earlier_disable(tmp_path):
    start = write_pyproject(tmp_path, '[tool.conveyor]\ndisable = ["a", "b"]\n')
    c = resolve({"enable": ["a"]}, environ={}, start=start)
    assert c.enable == ("a",) and c.disable == ("b",)


def test_unknown_keys_list_valid_ones(tmp_path):
    start = write_pyproject(tmp_path, "[tool.conveyor]\nbakend = 'x'\n")
    with pytest.raises(ConfigError, match=r"pyproject.toml\): unknown key\(s\) \['bakend'\]; valid keys are \[.*'backend'"):
        resolve(environ={}, start=start)
    (tmp_path / "pyproject.toml").write_text("[tool.conveyor]\n")
    with pytest.raises(ConfigError, match=r"arguments\): unknown key\(s\) \['stagez'\]"):
        resolve({"stagez": {}}, environ={}, start=start)


def test_env_autoload_and_plugin_lists():
    c = resolve(environ={"CONVEYOR_AUTOLOAD": "0", "CONVEYOR_PLUGINS": "x,y", "CONVEYOR_BLOCK_PLUGINS": "z"})
    assert (c.autoload, c.plugins, c.block_plugins) == (False, ("x", "y"), ("z",))


def test_bad_values_are_errors():
    with pytest.raises(ConfigError, match="list of stage names"):
        Config().merged({"enable": 3}, "arguments")
    with pytest.raises(ConfigError, match="both enabled and disabled"):
        Config(enable=("a",), disable=("a",))
    with pytest.raises(ConfigError, match="option tables"):
        Config().merged({"stages": {"a": 1}}, "arguments")


def test_a_pyproject_that_is_not_toml_names_the_file(tmp_path):
    start = write_pyproject(tmp_path, "[tool.conveyor\nbackend = 1\n")
    with pytest.raises(ConfigError, match=r"pyproject.toml\): not valid TOML"):
        resolve(environ={}, start=start)


def test_tool_conveyor_that_is_not_a_table_is_a_config_error(tmp_path):
    start = write_pyproject(tmp_path, '[tool]\nconveyor = "eager"\n')
    with pytest.raises(ConfigError, match=r"\[tool.conveyor\] must be a table .* not a str: 'eager'"):
        resolve(environ={}, start=start)


def test_a_bad_environment_value_names_its_variable():
    """Issue 23: errors that name their source."""
    with pytest.raises(conveyor.ConfigError, match=r"environment variable CONVEYOR_CACHE\): 'cache' must be"):
        conveyor.resolve(environ={"CONVEYOR_CACHE": "maybe"})
    with pytest.raises(conveyor.ConfigError, match=r"environment variable CONVEYOR_DYNAMIC"):
        conveyor.resolve(environ={"CONVEYOR_DYNAMIC": "sometimes"})
    assert conveyor.resolve(environ={"CONVEYOR_CACHE": "off", "CONVEYOR_PROGRESS": "yes"}).cache is False


def test_an_unknown_stage_named_in_the_environment_names_the_variable(monkeypatch):
    monkeypatch.setenv("CONVEYOR_ENABLE", "no_such_stage")
    with pytest.raises(conveyor.ConfigError, match=r"'enable' \(from environment variable CONVEYOR_ENABLE\): unknown"):
        conveyor.compile(lambda x: x + 1)(torch.ones(1))
    config = conveyor.resolve({"disable": ["dedupe"]}, environ={})
    assert config.source_of("disable") == " (from arguments)" and config.source_of("backend") == ""
