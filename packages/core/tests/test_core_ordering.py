import itertools

import pytest
from conveyor import Config, PipelineError, Plugins
from conveyor.errors import ConfigError, StageError
from conveyor.protocol.ordering import select, toposort
from conveyor.protocol.pipeline import Pipeline
from conveyor.testing.pytest_plugin import stage_plugin
from core_helpers import backend, wrapper


def names(stages):
    return [s.name for s in stages]


def test_declared_constraints_order_stages_and_ties_break_by_name():
    stages = {
        "c": wrapper("c", after=("a",)),
        "b": wrapper("b"),
        "a": wrapper("a", before=("b",)),
        "z": backend("z"),
        "d": wrapper("d", after=("missing",)),
    }
    assert names(toposort(stages)) == ["a", "b", "c", "d", "z"]


def test_registration_order_does_not_change_the_pipeline():
    specs = [wrapper("dd"), wrapper("bb", after=("dd",)), wrapper("aa", before=("dd",)), backend("eager2")]
    orders = set()
    for perm in itertools.permutations(specs):
        plugins = Plugins()
        for i, spec in enumerate(perm):
            plugins.register(stage_plugin(spec), name=f"p{i}")
        orders.add(tuple(names(Pipeline(Config(backend="eager2"), plugins).stages)))
    assert orders == {("aa", "dd", "bb", "eager2")}


def test_cycle_names_the_stages():
    stages = {"a": wrapper("a", after=("c",)), "b": wrapper("b", after=("a",)), "c": wrapper("c", after=("b",)), "x": wrapper("x")}
    with pytest.raises(PipelineError, match=r"cycle among \['a', 'b', 'c', 'a'\]"):
        toposort(stages)


def test_a_cycle_with_a_stage_behind_it_is_named():
    """``a`` comes after the cycle, has no successor and sorts first: the walk
    used to start there and fail with ``min() arg is an empty sequence`` (issue 23)."""
    stages = {"b": wrapper("b", after=("c",)), "c": wrapper("c", after=("b",)), "a": wrapper("a", after=("b",))}
    with pytest.raises(PipelineError, match=r"cycle among \['b', 'c', 'b'\]"):
        toposort(stages)


def test_missing_requirement_is_named():
    available = {"a": wrapper("a", requires=("b",)), "b": wrapper("b"), "eager": backend("eager")}
    with pytest.raises(PipelineError, match=r"stage 'a' requires \['b'\], which are disabled"):
        select(available, Config(disable=("b",)), "eager")
    del available["b"]
    with pytest.raises(PipelineError, match="not installed"):
        select(available, Config(), "eager")


def test_unknown_stage_name_in_config_lists_installed():
    available = {"a": wrapper("a"), "eager": backend("eager")}
    with pytest.raises(ConfigError, match=r"unknown stage\(s\) \['nope'\]; installed stages are \['a', 'eager'\]"):
        select(available, Config(disable=("nope",)), "eager")
    with pytest.raises(ConfigError, match="unknown backend 'nope'"):
        select(available, Config(backend="nope"), "eager")
    with pytest.raises(ConfigError, match="is a wrapper stage"):
        select(available, Config(backend="a"), "eager")


def test_no_backend_and_two_backends():
    with pytest.raises(ConfigError, match=r"unknown backend 'eager'; installed backends are \[\]"):
        select({"a": wrapper("a")}, Config(), "eager")
    available = {"e1": backend("e1"), "e2": backend("e2")}
    with pytest.raises(PipelineError, match=r"several backends enabled: \['e1', 'e2'\]"):
        select(available, Config(backend="e1", enable=("e2",)), "e1")


def test_off_by_default_stage_needs_enable():
    available = {"opt": wrapper("opt", enabled_by_default=False), "eager": backend("eager")}
    assert names(select(available, Config(), "eager")) == ["eager"]
    assert names(select(available, Config(enable=("opt",)), "eager")) == ["opt", "eager"]


def test_duplicate_stage_names_are_an_error():
    plugins = Plugins()
    plugins.register(stage_plugin(wrapper("a")), name="one")
    plugins.register(stage_plugin(wrapper("a")), name="two")
    with pytest.raises(PipelineError, match="registered twice: by 'one' and by 'two'"):
        plugins.stages()


def test_stage_spec_invariants():
    with pytest.raises(TypeError, match="no lower"):
        wrapper("w", impl=object())
    with pytest.raises(TypeError, match="tuple of names"):
        wrapper("w", after="x")
    with pytest.raises(ValueError, match="identifier"):
        wrapper("bad name")


def test_unknown_stage_option_is_an_error_listing_valid():
    plugins = Plugins()
    plugins.register(stage_plugin(wrapper("w", options={"level": 1})), name="w")
    with pytest.raises(ConfigError, match=r"unknown option\(s\) \['levle'\]; valid options are \['level'\]"):
        Pipeline(Config(stages={"w": {"levle": 2}}), plugins)
    pipe = Pipeline(Config(stages={"w": {"level": 2}}), plugins)
    assert pipe.options["w"] == {"level": 2}


def _pipeline_with(*specs, config=None):
    plugins = Plugins()
    plugins.register(stage_plugin(*specs), name="p")
    return Pipeline(config or Config(), plugins)


def test_a_backend_declares_the_devices_it_is_the_default_for():
    pipeline = _pipeline_with(backend("gpu_kernels", default_for=("cuda",)))
    assert pipeline.backend.name == "eager"
    assert pipeline.for_devices(frozenset({"cpu"})) is pipeline
    cuda = pipeline.for_devices(frozenset({"cuda"}))
    assert cuda.backend.name == "gpu_kernels"
    assert pipeline.for_devices(frozenset({"cuda"})) is cuda  # built once
    # a configured backend wins over the declarations
    configured = _pipeline_with(backend("gpu_kernels", default_for=("cuda",)), config=Config(backend="eager"))
    assert configured.for_devices(frozenset({"cuda"})) is configured


def test_only_a_backend_can_be_a_device_default():
    with pytest.raises(ValueError, match="only a backend"):
        wrapper("w", default_for=("cuda",))


def test_a_stage_probe_runs_when_a_pipeline_that_includes_it_is_built():
    calls = []

    def refuse():
        calls.append("probed")
        raise ImportError("torch has no compile_fx_inner")

    probed = backend("picky", probe=refuse)
    # installed but not chosen: never probed, the other pipelines build
    assert _pipeline_with(probed).backend.name == "eager"
    assert calls == []
    with pytest.raises(StageError, match=r"'picky': cannot work here: ImportError: torch has no compile_fx_inner"):
        _pipeline_with(probed, config=Config(backend="picky"))
    assert calls == ["probed"]
