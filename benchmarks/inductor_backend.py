"""The ``inductor`` backend against ``torch.compile(m)`` (issue 24).

A transformer-style stack (d=256, 6 pre-norm blocks of attention and a GELU
MLP, batch 32 x 16 tokens), side by side, ``OMP_NUM_THREADS=1``:

* eager;
* ``torch.compile(m)``: dynamo, AOTAutograd and Inductor;
* ``conveyor.compile(m, backend="inductor")``;
* ``torch.compile(m, backend="conveyor", options={"backend": "inductor"})``.

For each, inference (``torch.no_grad()``) and a training step (forward, a
loss, ``backward()``, gradients set to ``None``): the first call (the
compile; imports and model construction excluded) and the median per-call
time after warm-up. Each variant runs in a fresh process with an empty
Inductor cache folder (``TORCHINDUCTOR_CACHE_DIR``) and conveyor's disk cache
off, so no first call is served by another's compile; ``--warm`` shares one
Inductor cache folder between the variants and runs each twice, reporting
the second (a warm FX graph cache). Ratios are against ``torch.compile(m)``;
the last lines count Inductor's FX graph cache hits, misses and bypasses of
each measured process.

Run: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/inductor_backend.py``
(``--iters N``, ``--only NAME``, ``--warm``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

VARIANTS = ("eager", "torch.compile(m)", "conveyor inductor", "torch.compile conveyor inductor")
D, BLOCKS, BATCH, TOKENS, HEADS = 256, 6, 32, 16, 4


def build() -> Any:
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm1, self.norm2 = nn.LayerNorm(D), nn.LayerNorm(D)
            self.qkv, self.proj = nn.Linear(D, 3 * D), nn.Linear(D, D)
            self.up, self.down = nn.Linear(D, 4 * D), nn.Linear(4 * D, D)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            b, t, _ = x.shape
            q, k, v = self.qkv(self.norm1(x)).view(b, t, 3, HEADS, D // HEADS).permute(2, 0, 3, 1, 4)
            a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
            x = x + self.proj(a.transpose(1, 2).reshape(b, t, D))
            return x + self.down(torch.nn.functional.gelu(self.up(self.norm2(x))))

    torch.manual_seed(0)
    return nn.Sequential(*[Block() for _ in range(BLOCKS)])


def compiled(variant: str, model: Any) -> Any:
    import torch

    if variant == "eager":
        return model
    if variant == "torch.compile(m)":
        return torch.compile(model)
    if variant == "conveyor inductor":
        import conveyor

        return conveyor.compile(model, backend="inductor")
    return torch.compile(model, backend="conveyor", options={"backend": "inductor"})


def child(variant: str, iters: int) -> dict[str, float]:
    import torch

    torch.set_num_threads(1)
    x = torch.randn(BATCH, TOKENS, D)
    results: dict[str, float] = {}
    for mode in ("inference", "train"):
        model = build()
        fn = compiled(variant, model)
        params = list(model.parameters())

        def call(fn: Any = fn, mode: str = mode, params: list[Any] = params) -> None:
            if mode == "inference":
                with torch.no_grad():
                    fn(x)
                return
            fn(x).square().mean().backward()
            for p in params:
                p.grad = None

        start = time.perf_counter()
        call()
        results[f"{mode} first"] = time.perf_counter() - start
        for _ in range(3):
            call()
        times = []
        for _ in range(iters):
            start = time.perf_counter()
            call()
            times.append(time.perf_counter() - start)
        results[f"{mode} per call"] = statistics.median(times)
    from torch._dynamo.utils import counters

    for k in ("hit", "miss", "bypass"):
        results[f"fx graph cache {k}"] = counters["inductor"][f"fxgraph_cache_{k}"]
    return results


def run(variant: str, iters: int, cache_dir: str | None) -> dict[str, float]:
    env = dict(os.environ, OMP_NUM_THREADS="1", CONVEYOR_CACHE="0", CONVEYOR_PROGRESS="0")
    with tempfile.TemporaryDirectory() as fresh:
        env["TORCHINDUCTOR_CACHE_DIR"] = cache_dir or fresh
        out = subprocess.run(
            [sys.executable, __file__, "--child", variant, "--iters", str(iters)],
            env=env, check=True, capture_output=True, text=True,
        )
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iters", type=int, default=30)
    parser.add_argument("--only", choices=VARIANTS, action="append")
    parser.add_argument("--warm", action="store_true", help="share a warm Inductor cache between the variants")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.iters)))
        return
    variants = args.only or list(VARIANTS)
    rows: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory() as shared:
        for variant in variants:
            if args.warm:
                run(variant, 1, shared)
            rows[variant] = run(variant, args.iters, shared if args.warm else None)
            print(f"  {variant}: done", file=sys.stderr)
    columns = ("inference per call", "train per call", "inference first", "train first")
    base = rows.get("torch.compile(m)")
    print(f"d={D}, {BLOCKS} blocks, batch {BATCH}x{TOKENS}, OMP_NUM_THREADS=1, {'warm' if args.warm else 'cold'} Inductor cache")
    print(f"{'':34}" + "".join(f"{c:>26}" for c in columns))
    for variant, row in rows.items():
        cells = []
        for c in columns:
            value = row[c] * 1e3 if "per call" in c else row[c]
            unit = "ms" if "per call" in c else "s"
            ratio = f" ({row[c] / base[c]:.2f}x)" if base else ""
            cells.append(f"{value:.2f} {unit}{ratio}")
        print(f"{variant:34}" + "".join(f"{cell:>26}" for cell in cells))
    print("Inductor's FX graph cache (both modes, the measured process): hit / miss / bypass")
    for variant, row in rows.items():
        if variant != "eager":
            print(f"  {variant:32}" + " / ".join(str(int(row.get(f"fx graph cache {k}", 0))) for k in ("hit", "miss", "bypass")))


if __name__ == "__main__":
    main()
