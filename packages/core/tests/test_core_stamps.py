"""Stamps (Note [Stamps]): the driver's flat loop, every graph a stage
produces, the backend's entry as the graph it lowered, logging."""

import logging

import conveyor
import pytest
import torch
from conveyor import Lowering, Plugins, StageGraph, StageSpec
from conveyor.testing import check
from conveyor.testing.pytest_plugin import stage_plugin


class Doubling:
    """A wrapper that stamps a sub-pass and hands on two requests (as the
    autograd stage does); its run-time half adds the inner results."""

    def lower(self, request, options):
        conveyor.stamp(request.graph, "inspected")
        second = request.replace(label="second")

        def wrap(first_fn, second_fn):
            def run(args):
                a = first_fn(list(args))
                b = second_fn(list(args))
                return [x + y for x, y in zip(a, b)]

            return run

        return Lowering((request, second), wrap)


class Tagging:
    """A wrapper that changes nothing and records the order it ran in."""

    def __init__(self, seen):
        self.seen = seen

    def lower(self, request, options):
        self.seen.append(("tag", request.label))
        return Lowering.passthrough(request)


class Lowered:
    """A backend that rewrites what it receives (exp becomes a sin) and stamps
    the graph it lowered, or stamps nothing."""

    def __init__(self, seen, stamps=True):
        self.seen, self.stamps = seen, stamps

    def compile(self, request, options):
        self.seen.append(("backend", request.label))
        gm = torch.fx.GraphModule(request.graph, request.graph.graph)
        for n in gm.graph.nodes:
            if n.target is torch.ops.aten.exp.default:
                n.target = torch.ops.aten.sin.default
        gm.recompile()
        if self.stamps:
            conveyor.stamp(gm)
        return lambda args: gm(*args)


def pipeline(seen, stamps=True):
    plugins = Plugins()
    plugins.register(
        stage_plugin(
            StageSpec(name="doubling", kind="wrapper", impl=Doubling()),
            StageSpec(name="tagging", kind="wrapper", impl=Tagging(seen), after=("doubling",)),
            StageSpec(name="lowered", kind="backend", impl=Lowered(seen, stamps)),
        ),
        name="stamping",
    )
    return plugins


def test_flat_loop_runs_each_stage_on_every_request_and_wraps_back_up():
    seen = []
    c = conveyor.compile(lambda x: x.exp(), plugins=pipeline(seen), backend="lowered")
    x = torch.randn(3)
    torch.testing.assert_close(c(x), 2 * x.sin())
    assert seen[:4] == [("tag", "forward"), ("tag", "second"), ("backend", "forward"), ("backend", "second")]


def test_every_graph_is_stamped_with_its_stage_label_and_step():
    c = conveyor.compile(lambda x: x.exp(), plugins=pipeline([]), backend="lowered")
    c(torch.randn(3))
    graphs = conveyor.last_graphs(c)
    assert [(g.stage, g.label, g.step) for g in graphs] == [
        ("capture", "forward", ""),
        ("doubling", "forward", "inspected"),
        ("doubling", "forward", ""),
        ("doubling", "second", ""),
        ("tagging", "forward", ""),
        ("tagging", "second", ""),
        ("lowered", "forward", ""),
        ("lowered", "second", ""),
    ]
    assert str(graphs[1]).startswith("# after doubling: inspected (forward)\n")
    # the backend's entry is the graph it lowered, not the one it received
    assert "aten.sin" in graphs[-1].graph.code and "aten.exp" not in graphs[-1].graph.code
    assert "aten.exp" in graphs[-3].graph.code


def test_a_backend_that_stamps_nothing_is_stamped_with_its_input():
    c = conveyor.compile(lambda x: x.exp(), plugins=pipeline([], stamps=False), backend="lowered")
    c(torch.randn(3))
    last = conveyor.last_graphs(c)[-1]
    assert (last.stage, last.step) == ("lowered", "") and "aten.exp" in last.graph.code


def test_stamp_outside_a_driver_run_does_nothing():
    gm = torch.fx.symbolic_trace(lambda x: x + 1)
    conveyor.stamp(gm, "anything")  # no error, nowhere recorded


def test_stage_graph_stays_compatible():
    gm = torch.fx.symbolic_trace(lambda x: x + 1)
    g = StageGraph("s", "forward", gm)
    assert (g.step, g.artifact) == ("", None) and str(g).startswith("# after s (forward)\n")


def test_eager_backend_entry_is_the_graph_it_runs():
    def f(x):
        return x.detach().sin()

    c = conveyor.compile(f)
    with torch.no_grad():
        c(torch.randn(3))
    assert "detach" not in conveyor.last_graphs(c)[-1].graph.code  # dropped under no_grad
    assert "detach" in conveyor.last_graphs(c)[0].graph.code
    check(f, torch.randn(3, requires_grad=True))


def test_graphs_are_logged_through_logging(caplog):
    with caplog.at_level(logging.INFO, logger="conveyor.graphs"):
        conveyor.compile(lambda x: x.tan())(torch.randn(2))
    messages = [r.getMessage() for r in caplog.records if r.name == "conveyor.graphs"]
    assert messages[0].startswith("# after capture (forward)") and messages[-1].startswith("# after eager (forward)")


def test_log_switch_turns_a_stderr_handler_on_and_off(monkeypatch, capsys):
    monkeypatch.setenv("CONVEYOR_LOG_GRAPHS", "1")
    conveyor.compile(lambda x: x.tan())(torch.randn(2))
    assert "# after eager (forward)" in capsys.readouterr().err
    monkeypatch.delenv("CONVEYOR_LOG_GRAPHS")
    conveyor.compile(lambda x: x.cos())(torch.randn(2))
    assert "# after" not in capsys.readouterr().err
    assert not logging.getLogger("conveyor.graphs").handlers


@pytest.mark.parametrize("bad", ["lower", "backend"])
def test_a_stage_returning_the_wrong_kind_names_the_stage(bad):
    class Wrong:
        def lower(self, request, options):
            return 42

        def compile(self, request, options):
            return Lowering.passthrough(request)

    plugins = Plugins()
    kind = "wrapper" if bad == "lower" else "backend"
    plugins.register(stage_plugin(StageSpec(name="wrong", kind=kind, impl=Wrong())), name="wrong")
    expected = "lower\\(\\) returned int" if bad == "lower" else "backend returned Lowering"
    with pytest.raises(conveyor.StageError, match=f"conveyor stage 'wrong': {expected}"):
        conveyor.compile(lambda x: x + 1, plugins=plugins, backend="wrong" if bad == "backend" else "eager")(
            torch.ones(1)
        )
