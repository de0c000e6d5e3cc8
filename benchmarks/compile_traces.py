"""Traces per compile: how many ``make_fx`` runs and functional
interpretations one compile of the default pipeline does, and where its
time goes.

Counting wraps torch's ``_MakefxTracer.trace`` (every ``make_fx`` run),
``FunctionalTensorMode.__init__`` (every run on functional tensors) and
``torch.func.functionalize`` for the duration of this benchmark only.

Run: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/compile_traces.py``;
``--profile NAME`` prints a cProfile (cumulative) of that program's compile;
``--ratios`` prints the backend compile time behind dynamo (dynamo's own
tracing excluded; the thread's CPU time, the collector off), conveyor / aot_eager, the minimum (the
stable figure on a shared machine) and the median over interleaved rounds, for the programs of
``zoo()`` (fn3, the 12-block model, MobileNetV2, RegNet, ConvNeXt, Phi3 and
the other Hugging Face models; ``--models``/``--modes`` pick some).
``--ratios --calls`` counts the Python function calls of each backend's
compile instead (cProfile's count: the same on a loaded machine as on a
quiet one, where time is not; it sees Python work only, not time spent in
C++ kernels or the dispatcher).
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import gc
import os
import pstats
import statistics
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ["CONVEYOR_CACHE"] = "0"  # count the pipeline's work, not a disk cache hit

import conveyor  # noqa: E402
import torch  # noqa: E402
import torch._dynamo  # noqa: E402
from torch._subclasses.functional_tensor import FunctionalTensorMode  # noqa: E402
from torch.fx.experimental import proxy_tensor  # noqa: E402

sys.path.insert(0, os.path.dirname(__file__))
from overhead import hf_models, pointwise, residual_mlp  # noqa: E402
from torch._dynamo.backends.registry import lookup_backend, register_backend  # noqa: E402

torch.set_num_threads(1)


@contextlib.contextmanager
def counting() -> Iterator[Counter[str]]:
    """Counts traces while the block runs; restores torch on exit."""
    counts: Counter[str] = Counter()
    trace, init, functionalize = proxy_tensor._MakefxTracer.trace, FunctionalTensorMode.__init__, torch.func.functionalize

    def counted_trace(self: Any, f: Any, *args: Any) -> Any:
        counts["make_fx"] += 1
        return trace(self, f, *args)

    def counted_init(self: Any, *a: Any, **k: Any) -> None:
        counts["functional runs"] += 1
        init(self, *a, **k)

    def counted_functionalize(*a: Any, **k: Any) -> Any:
        counts["torch.func.functionalize"] += 1
        return functionalize(*a, **k)

    proxy_tensor._MakefxTracer.trace = counted_trace  # type: ignore[method-assign]
    FunctionalTensorMode.__init__ = counted_init  # type: ignore[method-assign]
    torch.func.functionalize = counted_functionalize
    try:
        yield counts
    finally:
        proxy_tensor._MakefxTracer.trace = trace  # type: ignore[method-assign]
        FunctionalTensorMode.__init__ = init  # type: ignore[method-assign]
        torch.func.functionalize = functionalize


def cases() -> list[tuple[str, Callable[[], None]]]:
    """(name, one fresh compile and first call) per program."""

    def standalone(train: bool) -> Callable[[], None]:
        def run() -> None:
            torch.manual_seed(0)
            m = residual_mlp()
            fn = conveyor.compile(m)
            x = torch.randn(16, 64)
            if train:
                fn(x).sum().backward()
            else:
                with torch.no_grad():
                    fn(x)

        return run

    def behind_dynamo(build: Callable[[], torch.nn.Module], inputs: Callable[[], Any], train: bool) -> Callable[[], None]:
        def run() -> None:
            torch._dynamo.reset()
            torch.manual_seed(0)
            fn = torch.compile(build(), backend="conveyor")
            if train:
                fn(**inputs()).logits.sum().backward()
            else:
                with torch.no_grad():
                    fn(**inputs())

        return run

    out = [("12-block no_grad", standalone(False)), ("12-block train", standalone(True))]
    for name, build, inputs in hf_models():
        out += [(f"{name} forward", behind_dynamo(build, inputs, False)), (f"{name} train", behind_dynamo(build, inputs, True))]
    return out


class _Logits:
    def __init__(self, t: torch.Tensor) -> None:
        self.logits = t


class _WithLogits(torch.nn.Module):
    """A module whose output has ``.logits``, as the Hugging Face models' do."""

    def __init__(self, inner: Callable[..., torch.Tensor]) -> None:
        super().__init__()
        self.inner = inner

    def forward(self, **kwargs: torch.Tensor) -> Any:
        return _Logits(self.inner(*kwargs.values()))


def zoo() -> list[tuple[str, Callable[[], torch.nn.Module], Callable[[], dict[str, torch.Tensor]]]]:
    """The issue's zoo for compile time behind dynamo: the 3-tensor function
    (fn3), the 12-block residual MLP, then small Hugging Face configs
    (MobileNetV2, RegNet, ConvNeXt, Phi3) and ``overhead.hf_models()``."""
    out: list[tuple[str, Callable[[], torch.nn.Module], Callable[[], dict[str, torch.Tensor]]]] = [
        ("fn3", lambda: _WithLogits(pointwise), lambda: {k: torch.randn(64, 64, requires_grad=True) for k in "abc"}),
        ("12-block", lambda: _WithLogits(residual_mlp()), lambda: {"x": torch.randn(16, 64)}),
    ]
    try:
        import transformers
    except ImportError:
        return out
    transformers.logging.set_verbosity_error()
    small = {"hidden_sizes": [8, 16, 24, 32], "depths": [1, 1, 2, 1], "num_labels": 5}

    def images() -> dict[str, torch.Tensor]:
        return {"pixel_values": torch.randn(2, 3, 32, 32)}

    def mobilenet_v2() -> torch.nn.Module:
        cfg = transformers.MobileNetV2Config(num_channels=3, image_size=32, depth_multiplier=0.25, num_labels=5)
        return transformers.MobileNetV2ForImageClassification(cfg)

    def regnet() -> torch.nn.Module:
        return transformers.RegNetForImageClassification(transformers.RegNetConfig(embedding_size=8, groups_width=8, **small))

    def convnext() -> torch.nn.Module:
        return transformers.ConvNextForImageClassification(transformers.ConvNextConfig(image_size=32, **small))

    def phi3() -> torch.nn.Module:
        cfg = transformers.Phi3Config(
            vocab_size=100, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, use_cache=False, pad_token_id=0, bos_token_id=0, eos_token_id=0,
        )
        return transformers.Phi3ForCausalLM(cfg)

    def ids() -> dict[str, torch.Tensor]:
        return {"input_ids": torch.randint(0, 100, (2, 16))}

    out += [("mobilenet_v2", mobilenet_v2, images), ("regnet", regnet, images), ("convnext", convnext, images)]
    return [*out, ("phi3", phi3, ids), *hf_models()]


_backend_seconds: dict[str, float] = {}


def _timed(name: str, calls: bool = False) -> Callable[..., Any]:
    """Backend ``name``, its time spent (this thread's CPU time: the compile
    runs in the calling thread, and on a shared machine wall time would count
    the time other processes hold the core) added to ``_backend_seconds``;
    ``calls``: the thousands of Python function calls it made instead."""
    inner = lookup_backend(name)

    def backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        if calls:
            prof = cProfile.Profile()
            prof.enable()
            try:
                return inner(gm, example_inputs)
            finally:
                prof.disable()
                _backend_seconds[name] = _backend_seconds.get(name, 0.0) + pstats.Stats(prof).total_calls / 1e6  # type: ignore[attr-defined]
        t0 = time.thread_time()
        try:
            return inner(gm, example_inputs)
        finally:
            _backend_seconds[name] = _backend_seconds.get(name, 0.0) + time.thread_time() - t0

    return backend


def ratios(rounds: int, only: list[str] | None, modes: list[str], calls: bool = False) -> None:
    """Backend compile ms behind dynamo, aot_eager and conveyor: the minimum
    and the median over interleaved rounds (the backends' order alternating),
    each compile after a ``gc.collect()`` and with the collector off while it
    runs (a collection the other backend's garbage set off is not counted)."""
    for name in ("aot_eager", "conveyor"):
        register_backend(name=f"timed_{name}")(_timed(name, calls))
    models = [m for m in zoo() if only is None or m[0] in only]
    unit = "k calls" if calls else "ms"
    print(f"{'model':22} {'aot_eager ' + unit:>17} {'conveyor ' + unit:>16} {'ratio':>6} {'median':>6}")
    for model_name, build, inputs in models:
        for mode in modes:
            times: dict[str, list[float]] = {"aot_eager": [], "conveyor": []}
            for r in range(rounds + 1):  # the first round warms torch's own caches: not counted
                for backend in sorted(times, reverse=bool(r % 2)):
                    torch._dynamo.reset()
                    _backend_seconds.clear()
                    torch.manual_seed(0)
                    fn = torch.compile(build(), backend=f"timed_{backend}")
                    x = inputs()
                    gc.collect()
                    gc.disable()
                    try:
                        if mode == "forward":
                            with torch.no_grad():
                                fn(**x)
                        else:
                            fn(**x).logits.sum().backward()
                    finally:
                        gc.enable()
                    if r:
                        times[backend].append(_backend_seconds.get(backend, 0.0) * 1e3)
            a, c = times["aot_eager"], times["conveyor"]
            median = statistics.median(c) / statistics.median(a)
            print(f"{model_name + ' ' + mode:22} {min(a):17.0f} {min(c):16.0f} {min(c) / min(a):6.2f} {median:6.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", help="profile the compile of this program (a name from the table)")
    parser.add_argument("--lines", type=int, default=40)
    parser.add_argument("--ratios", action="store_true", help="backend compile time, conveyor / aot_eager")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--models", help="with --ratios: comma-separated names from zoo() (default: all)")
    parser.add_argument("--modes", default="forward,train", help="with --ratios: forward, train or both")
    parser.add_argument("--calls", action="store_true", help="with --ratios: count Python calls, not time")
    opts = parser.parse_args()
    if opts.ratios:
        ratios(opts.rounds, opts.models.split(",") if opts.models else None, opts.modes.split(","), opts.calls)
        return
    table = cases()
    if opts.profile:
        run = dict(table)[opts.profile]
        run()  # warm torch's own caches (dynamo, decompositions)
        prof = cProfile.Profile()
        prof.enable()
        run()
        prof.disable()
        pstats.Stats(prof).sort_stats("cumulative").print_stats(opts.lines)
        return
    print(f"{'program':20} {'make_fx':>8} {'functional runs':>16} {'func.functionalize':>19} {'s':>6}")
    for name, run in table:
        run()  # warm
        with counting() as counts:
            t0 = time.perf_counter()
            run()
            dt = time.perf_counter() - t0
        print(f"{name:20} {counts['make_fx']:8} {counts['functional runs']:16} {counts['torch.func.functionalize']:19} {dt:6.2f}")


if __name__ == "__main__":
    main()
