"""Traces per compile: how many ``make_fx`` runs and functional
interpretations one compile of the default pipeline does, and where its
time goes.

Counting wraps torch's ``_MakefxTracer.trace`` (every ``make_fx`` run),
``FunctionalTensorMode.__init__`` (every run on functional tensors) and
``torch.func.functionalize`` for the duration of this benchmark only.

Run: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/compile_traces.py``;
``--profile NAME`` prints a cProfile (cumulative) of that program's compile;
``--ratios`` prints the backend compile time behind dynamo (dynamo's own
tracing excluded), conveyor / aot_eager, each the minimum over interleaved
rounds (the stable figure on a shared machine), for the 12-block model and
the Hugging Face models.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import os
import pstats
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
from overhead import _backend_seconds, _timed, hf_models, residual_mlp  # noqa: E402
from torch._dynamo.backends.registry import register_backend  # noqa: E402

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


def ratios(rounds: int) -> None:
    """Backend compile ms behind dynamo, aot_eager and conveyor, min over rounds."""
    for name in ("aot_eager", "conveyor"):
        register_backend(name=f"timed_{name}")(_timed(name))

    def twelve_block() -> Any:
        class Out:
            def __init__(self, t: torch.Tensor) -> None:
                self.logits = t

        class Wrapped(torch.nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.m = residual_mlp()

            def forward(self, x: torch.Tensor) -> Any:
                return Out(self.m(x))

        return Wrapped()

    models = [("12-block", twelve_block, lambda: {"x": torch.randn(16, 64)}), *hf_models()]
    print(f"{'model':18} {'aot_eager ms':>12} {'conveyor ms':>12} {'ratio':>6}")
    for model_name, build, inputs in models:
        for mode in ("forward", "train"):
            best = {"aot_eager": float("inf"), "conveyor": float("inf")}
            for _ in range(rounds):
                for backend in best:
                    torch._dynamo.reset()
                    _backend_seconds.clear()
                    torch.manual_seed(0)
                    fn = torch.compile(build(), backend=f"timed_{backend}")
                    if mode == "forward":
                        with torch.no_grad():
                            fn(**inputs())
                    else:
                        fn(**inputs()).logits.sum().backward()
                    best[backend] = min(best[backend], _backend_seconds.get(backend, 0.0) * 1e3)
            a, c = best["aot_eager"], best["conveyor"]
            print(f"{model_name + ' ' + mode:18} {a:12.0f} {c:12.0f} {c / a:6.2f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--profile", help="profile the compile of this program (a name from the table)")
    parser.add_argument("--lines", type=int, default=40)
    parser.add_argument("--ratios", action="store_true", help="backend compile time, conveyor / aot_eager")
    parser.add_argument("--rounds", type=int, default=3)
    opts = parser.parse_args()
    if opts.ratios:
        ratios(opts.rounds)
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
