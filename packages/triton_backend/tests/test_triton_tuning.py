"""Tuned launches (Note [Tuned launches] in ``conveyor_triton.tuning``).

There is no GPU here, so the tuning runs in Triton's interpreter on launches
chosen for a GPU (``launch_for="cuda"``), with a timer the test controls: for
each candidate position, a timer that makes that candidate the fastest, so
that every candidate launch of every kernel is the one that computes the
program's results at least once, checked against eager."""

from __future__ import annotations

import json

import conveyor_triton
import pytest
import torch
from conveyor.testing import check
from conveyor_triton import tuning
from conveyor_triton.launch import Launch


@pytest.fixture(autouse=True)
def _small_kernels_tuned(monkeypatch):
    monkeypatch.setattr(tuning, "MIN_ELEMENTS", 0)  # the interpreter runs small programs only


def _layer_norm(x, w, b):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b) * 2


PROGRAMS = {
    # a pointwise kernel over 3000 elements (blocks of 2048, 1024 and 4096 tried)
    "pointwise": (lambda x, y: x * y + 1, lambda: (torch.randn(3000), torch.randn(3000))),
    # persistent rows: softmax over 100 (a tile of 128), layer norm over 256
    "softmax": (lambda x: torch.softmax(x * 2, -1), lambda: (torch.randn(64, 100),)),
    "layer_norm": (_layer_norm, lambda: (torch.randn(32, 256), torch.randn(256), torch.randn(256))),
    # a looping reduction: rows of 5000, longer than a persistent tile
    "long_rows": (lambda x: (x.exp().sum(-1), x.amax(-1)), lambda: (torch.randn(80, 5000),)),
    # few long rows: a split reduction, whose first kernel is not tuned and whose combine kernel is
    "split": (lambda x: x.exp().sum(-1), lambda: (torch.randn(4, 5000),)),
    # an outer reduction (over the leading dimension, a bias gradient's shape)
    "outer": (lambda x: (x * 3).sum(0), lambda: (torch.randn(512, 48),)),
}


def _fastest(position: int):
    """A timer that makes the candidate at ``position`` (or the last, when
    there are fewer) the fastest; it runs each candidate it times."""
    seen: list[Launch] = []

    def timer(launch: Launch, run) -> float:
        run()
        seen.append(launch)
        return 0.0 if len(seen) - 1 == position else 1.0 + len(seen)

    def reset() -> None:
        seen.clear()

    timer.reset = reset  # type: ignore[attr-defined]
    return timer


def _cases():
    for name in sorted(PROGRAMS):
        for position in range(4):
            # the looping reduction's runs take 20 s each in the interpreter: one runs by default
            marks = [pytest.mark.slow] if name == "long_rows" and position != 1 else []
            yield pytest.param(name, position, marks=marks, id=f"{name}-{position}")


@pytest.mark.parametrize(("name", "position"), _cases())
def test_every_candidate_launch_computes_eagers_values(triton_only, tmp_path, name, position):
    fn, make_args = PROGRAMS[name]
    timer = _fastest(position)
    chosen: list[Launch] = []
    real_tune = tuning.tune

    def tune(run, options, device, kernel_file):
        timer.reset()
        best = real_tune(run, options, device, kernel_file)
        chosen.append(best)
        assert best in options
        if position < len(options):
            assert best == options[position]
        return best

    with tuning.tuning_on_cpu(timer), pytest.MonkeyPatch.context() as mp:
        mp.setattr(tuning, "tune", tune)
        result = check(fn, *make_args(), compile=triton_only(launch_for="cuda", cache_dir=str(tmp_path)), atol=1e-4, rtol=1e-5)
    (prog,) = conveyor_triton.programs(result.compiled)
    assert chosen, "no kernel was tuned"
    kept = [launch for step in prog.kernels for launch in step._tuned.values()]
    assert all(launch in kept for launch in chosen)


def test_candidates_keep_what_the_source_fixes(monkeypatch):
    pointwise = Launch(1024, None, 4, 3, False)
    assert tuning.candidates(pointwise, 3000, None)[0] == pointwise
    assert {c.xblock for c in tuning.candidates(pointwise, 3000, None)} == {512, 1024, 2048}
    assert all(c.grid == -(-3000 // c.xblock) for c in tuning.candidates(pointwise, 3000, None))
    persistent = Launch(32, 128, 8, 2, True)
    assert all(c.rblock == 128 for c in tuning.candidates(persistent, 64, 100))  # the whole row
    looping = Launch(1, 1024, 8, 4, False)
    options = tuning.candidates(looping, 4, 5000)
    assert {(c.xblock, c.rblock) for c in options} >= {(1, 1024), (2, 512), (1, 2048)}
    assert all(c.xblock * c.rblock <= tuning.MAX_TILE for c in options)
    split = Launch(1, 1024, 8, 64, False, split=16, chunk=4096)
    assert tuning.candidates(split, 4, 60000) == (split,)  # the chunk is in its source
    assert not tuning.tunable("tl.atomic_add(p, v)", pointwise, 1 << 20)
    assert tuning.tunable("tl.load(p)", pointwise, 1 << 20)
    monkeypatch.setattr(tuning, "MIN_ELEMENTS", 1 << 16)
    assert not tuning.tunable("tl.load(p)", pointwise, 3000)  # launch-bound: kept as chosen


def test_the_choice_is_kept_beside_the_kernel_and_read_back(triton_only, tmp_path):
    fn, make_args = PROGRAMS["softmax"]
    timer = _fastest(1)
    with tuning.tuning_on_cpu(timer):
        check(fn, *make_args(), compile=triton_only(launch_for="cuda", cache_dir=str(tmp_path)), atol=1e-4, rtol=1e-5)
    (record,) = tmp_path.rglob("*.tune.json")
    (choice,) = json.loads(record.read_text()).values()  # one device's choice: "cpu" here
    timer.reset()

    def untimed(launch, run):
        raise AssertionError("a recorded choice is measured again")

    with tuning.tuning_on_cpu(untimed):  # a new program, the same kernel source: read, not measured
        result = check(fn, *make_args(), compile=triton_only(launch_for="cuda", cache_dir=str(tmp_path)), atol=1e-4, rtol=1e-5)
    (prog,) = conveyor_triton.programs(result.compiled)
    ((launch,),) = [tuple(step._tuned.values()) for step in prog.kernels]
    assert {"xblock": launch.xblock, "rblock": launch.rblock, "num_warps": launch.num_warps} == choice


def test_nothing_is_tried_on_cpu_or_with_the_option_off(triton_only, tmp_path):
    fn, make_args = PROGRAMS["pointwise"]
    if torch.get_default_device().type == "cpu":  # on CUDA launches are tried: the half below
        result = check(fn, *make_args(), compile=triton_only(launch_for="cuda"))
        (prog,) = conveyor_triton.programs(result.compiled)
        assert all(not step._tuned or set(step._tuned.values()) == {step.kernel.launch} for step in prog.kernels)

    def untimed(launch, run):
        raise AssertionError("tuned with autotune off")

    with tuning.tuning_on_cpu(untimed):
        check(fn, *make_args(), compile=triton_only(launch_for="cuda", autotune=False))
    assert not list(tmp_path.rglob("*.tune.json"))


def test_a_corrupt_record_is_measured_again(tmp_path):
    kernel = tmp_path / "ab" / "k_ab.py"
    kernel.parent.mkdir(mode=0o700)
    kernel.write_text("")
    tuning.record_path(kernel).write_text("{torn")
    kernel.parent.chmod(0o700)
    options = (Launch(1024, None, 4, 3, False), Launch(512, None, 2, 6, False))
    ran: list[Launch] = []
    with tuning.tuning_on_cpu(lambda launch, run: (run(), 1.0 if launch.xblock == 1024 else 0.5)[1]):
        best = tuning.tune(ran.append, options, torch.device("cpu"), kernel)
    assert best == options[1] and ran == list(options)
    assert json.loads(tuning.record_path(kernel).read_text()) == {"cpu": {"xblock": 512, "rblock": None, "num_warps": 2}}
