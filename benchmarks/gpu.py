"""On a CUDA GPU: conveyor's triton backend checked against eager, then timed
side by side with eager and TorchInductor, in one run.

Each workload is first checked with ``conveyor.testing.check`` (outputs,
aliasing, inputs after the call, gradients), then each of eager,
``conveyor.compile(..., backend="triton")`` and ``torch.compile`` (Inductor)
is timed with CUDA events: the median of ``--reps`` calls after warm-up
calls, forward only for inference rows and forward + backward for training
rows. Ratios are against eager on the same GPU in the same run.

    TRITON_INTERPRET=0 python benchmarks/gpu.py [--reps 50]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import traceback
from collections.abc import Callable
from typing import Any

os.environ.setdefault("TRITON_INTERPRET", "0")

import conveyor  # noqa: E402
import torch  # noqa: E402
from conveyor.testing import check  # noqa: E402


def _block(d: int) -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.LayerNorm(d), torch.nn.Linear(d, 4 * d), torch.nn.GELU(), torch.nn.Linear(4 * d, d))


def _softmax(x: torch.Tensor) -> torch.Tensor:
    return torch.softmax(x * 0.125, dim=-1)


def _layer_norm_residual(x: torch.Tensor, w: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.layer_norm(x + x.sigmoid(), x.shape[-1:], w, b).relu()


def workloads(dev: str) -> list[tuple[str, Any, tuple[Any, ...], bool]]:
    """(name, function or module, inputs, train)."""
    torch.manual_seed(0)
    enc = torch.nn.TransformerEncoderLayer(256, 8, 1024, dropout=0.0, batch_first=True).to(dev)
    return [
        ("softmax 4096x4096", _softmax, (torch.randn(4096, 4096, device=dev),), False),
        (
            "layernorm+residual 8192x1024",
            _layer_norm_residual,
            (torch.randn(8192, 1024, device=dev), torch.randn(1024, device=dev), torch.randn(1024, device=dev)),
            False,
        ),
        ("mlp block 4096x512 (train)", _block(512).to(dev), (torch.randn(4096, 512, device=dev),), True),
        ("encoder layer 32x128x256 (train)", enc, (torch.randn(32, 128, 256, device=dev),), True),
    ]


def _timed(fn: Callable[..., Any], args: tuple[Any, ...], train: bool, reps: int) -> float:
    def step() -> None:
        out = fn(*args)
        if train:
            out.float().square().mean().backward()

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=50)
    opts = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: this benchmark needs one", file=sys.stderr)
        return 2
    import triton

    print(f"torch {torch.__version__}, triton {triton.__version__}, {torch.cuda.get_device_name()}")
    failures = 0
    rows = []
    for name, fn, args, train in workloads("cuda"):
        inputs = tuple(a.requires_grad_() if train and isinstance(a, torch.Tensor) else a for a in args)
        try:
            check(fn, *inputs, compile=lambda f: conveyor.compile(f, backend="triton"), atol=1e-3, rtol=1e-3)
            verdict = "exact"
        except Exception as exc:  # reported, and the run goes on to the next workload
            failures += 1
            verdict = f"FAILED: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"
            traceback.print_exc()
        times = {"eager": _timed(fn, inputs, train, opts.reps)}
        for label, compiled in (
            ("conveyor", conveyor.compile(fn, backend="triton")),
            ("inductor", torch.compile(fn)),
        ):
            try:
                times[label] = _timed(compiled, inputs, train, opts.reps)
            except Exception as exc:
                times[label] = float("nan")
                print(f"{name}: {label} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        rows.append((name, verdict, times))
    print(f"\n{'workload':38} {'eager ms':>9} {'conveyor':>9} {'inductor':>9} {'conv/eager':>10} {'ind/eager':>9}  check")
    for name, verdict, t in rows:
        print(
            f"{name:38} {t['eager']:9.3f} {t['conveyor']:9.3f} {t['inductor']:9.3f} "
            f"{t['conveyor'] / t['eager']:10.2f} {t['inductor'] / t['eager']:9.2f}  {verdict}"
        )
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
