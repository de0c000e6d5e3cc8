"""Compile timings (Note [Compile timings]): each stage run's seconds in its
stamps and in one INFO line per compile; progress on stderr for slow
compiles only, and the ``progress`` switch."""

import logging
import re
import time

import conveyor
import pytest
import torch
from conveyor import Lowering, Plugins, StageSpec
from conveyor.protocol import timings
from conveyor.protocol.config import resolve
from conveyor.testing.pytest_plugin import stage_plugin


class Napping:
    """A wrapper that sleeps ``options["seconds"]``, then hands the request on."""

    def lower(self, request, options):
        time.sleep(options["seconds"])
        return Lowering.passthrough(request)


def napping(seconds):
    plugins = Plugins()
    spec = StageSpec(name="napping", kind="wrapper", impl=Napping(), options={"seconds": seconds})
    plugins.register(stage_plugin(spec), name="napping")
    return plugins


def double(x):
    return x * 2


def compile_once(seconds=0.0, **options):
    c = conveyor.compile(double, plugins=napping(seconds), cache=False, **options)
    torch.testing.assert_close(c(torch.ones(3)), torch.full((3,), 2.0))
    return c


def summaries(caplog):
    return [r.getMessage() for r in caplog.records if r.name == "conveyor" and r.getMessage().startswith("compiled ")]


def test_one_info_line_per_compile_names_each_stage_with_its_seconds(caplog):
    with caplog.at_level(logging.INFO, logger="conveyor"):
        c = compile_once(0.05)
        c(torch.ones(3))  # no compile: no line
    [line] = summaries(caplog)
    assert line.startswith("compiled double (forward) in ")
    times = dict(re.findall(r"(\w+) (\d+\.\d\d)(?:,|$)", line.split(": ", 1)[1]))
    assert list(times) == ["capture", "napping", "eager"]
    assert float(times["napping"]) >= 0.05
    with caplog.at_level(logging.INFO, logger="conveyor"):
        compile_once()
    assert len(summaries(caplog)) == 2


def test_training_line_names_both_programs_and_sums_a_stage_over_its_runs():
    runs = (
        timings.StageTime("autograd", "forward", 0.5),
        timings.StageTime("eager", "forward", 0.25),
        timings.StageTime("eager", "backward", 0.5),
    )
    line = timings.summary("Net", 1.5, 0.25, runs)
    assert line == "compiled Net (forward, backward) in 1.50 s: capture 0.25, autograd 0.50, eager 0.75"


def test_stamps_carry_their_stage_runs_seconds():
    graphs = {g.stage: g for g in conveyor.last_graphs(compile_once(0.05))}
    assert graphs["napping"].seconds >= 0.05
    assert graphs["capture"].seconds is not None and graphs["capture"].seconds > 0
    assert graphs["eager"].seconds is not None
    assert re.fullmatch(r"# after napping \(forward\) in 0\.\d\d s", str(graphs["napping"]).splitlines()[0])


def test_a_slow_compile_says_which_stage_it_starts(monkeypatch, capsys):
    # a clock that moves only while the napping stage sleeps: the capture takes no time
    # whatever the machine's load, so the compile becomes slow inside napping, not before it
    clock = [0.0]
    monkeypatch.setattr(timings, "stopwatch", lambda: clock[0])
    monkeypatch.setattr(time, "sleep", lambda seconds: clock.__setitem__(0, clock[0] + seconds))
    monkeypatch.setattr(timings, "PROGRESS_AFTER_S", 0.02)
    compile_once(0.05)
    err = capsys.readouterr().err
    assert "conveyor: compiling double: eager (forward) ..." in err
    assert "napping (forward) ..." not in err  # the compile was not slow yet when napping began
    assert re.search(r"conveyor: compiled double in \d+\.\d s", err)


def test_a_fast_compile_prints_nothing(capsys):
    compile_once()
    assert "conveyor:" not in capsys.readouterr().err


@pytest.mark.parametrize("how", ["argument", "environment"])
def test_progress_off_silences_a_slow_compile(monkeypatch, capsys, how):
    monkeypatch.setattr(timings, "PROGRESS_AFTER_S", 0.02)
    if how == "environment":
        monkeypatch.setenv("CONVEYOR_PROGRESS", "0")
        compile_once(0.05)
    else:
        compile_once(0.05, progress=False)
    assert "conveyor:" not in capsys.readouterr().err


def test_progress_config_key():
    assert resolve(environ={}).progress is True
    assert resolve(environ={"CONVEYOR_PROGRESS": "0"}).progress is False
    assert resolve({"progress": False}, environ={}).progress is False
    with pytest.raises(conveyor.ConfigError, match="'progress' must be true or false"):
        resolve({"progress": 3.5}, environ={})


def test_a_failed_compile_logs_no_summary(caplog):
    class Failing:
        def lower(self, request, options):
            raise RuntimeError("no")

    plugins = Plugins()
    plugins.register(stage_plugin(StageSpec(name="failing", kind="wrapper", impl=Failing())), name="failing")
    c = conveyor.compile(lambda x: x + 1, plugins=plugins, cache=False)
    with caplog.at_level(logging.INFO, logger="conveyor"), pytest.raises(conveyor.StageError):
        c(torch.ones(2))
    assert summaries(caplog) == []


class Stepping:
    """A wrapper that times two steps of its own, one of them twice."""

    def lower(self, request, options):
        from conveyor.stage_api import timed_step

        for _ in range(2):
            with timed_step("think"):
                time.sleep(0.02)
        with timed_step("write"):
            pass
        return Lowering.passthrough(request)


def test_a_stage_times_its_own_steps(caplog):
    plugins = Plugins()
    plugins.register(stage_plugin(StageSpec(name="stepping", kind="wrapper", impl=Stepping())), name="stepping")
    with caplog.at_level(logging.INFO, logger="conveyor"):
        conveyor.compile(double, plugins=plugins, cache=False)(torch.ones(3))
    [line] = summaries(caplog)
    found = re.search(r"stepping (\d\.\d\d) \(think (\d\.\d\d), write (\d\.\d\d)\)", line)
    assert found, line
    stage, think, _ = (float(g) for g in found.groups())
    assert think >= 0.04 and stage >= think  # the steps add up, inside their stage's run
    with timed_step_outside():
        pass


def timed_step_outside():
    from conveyor.stage_api import timed_step

    return timed_step("nowhere")  # outside a compile it only runs its block


def test_summary_puts_steps_after_their_stage():
    runs = (
        timings.StageTime("triton", "forward", 0.5),
        timings.StageTime("triton", "forward", 0.25, "decompose"),
        timings.StageTime("triton", "backward", 0.5),
        timings.StageTime("triton", "backward", 0.25, "decompose"),
        timings.StageTime("triton", "backward", 0.125, "fuse"),
    )
    line = timings.summary("Net", 1.0, None, runs)
    assert line == "compiled Net (forward, backward) in 1.00 s: triton 1.00 (decompose 0.50, fuse 0.12)"
