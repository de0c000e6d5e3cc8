"""The ``inductor`` backend against ``torch.compile(m)`` (issue 24).

A transformer-style stack (d=256, 6 pre-norm blocks of attention and a GELU
MLP, batch 32 x 16 tokens), side by side, ``OMP_NUM_THREADS=1``:

* eager;
* ``torch.compile(m)``: dynamo, AOTAutograd and Inductor;
* ``conveyor.compile(m, backend="inductor")``;
* ``torch.compile(m, backend="conveyor", options={"backend": "inductor"})``.

For each, inference (``torch.no_grad()``) and a training step (forward, a
loss, ``backward()``, gradients set to ``None``).

**First calls**: the time from the compile call (``torch.compile(m)``,
``conveyor.compile(m, ...)``, with whatever its entry point imports on the
way, ``import conveyor`` included) to the first result, each (variant, mode)
in a fresh process after ``import torch`` and the model's construction; the
variants run in turn, round after round (``--rounds N``), and each one's
median is reported. As wall time and as CPU time: the process's own and that
of the C++ builds it waited for (``getrusage`` of its children), which,
unlike the wall time, does not grow with other processes' load; and the own
alone (the Python work: tracing, conveyor's stages, Inductor's lowering and
code generation, its cache lookups). Two settings:

* **cold** (the default): an empty Inductor cache folder
  (``TORCHINDUCTOR_CACHE_DIR``) per process and conveyor's disk cache off
  (``CONVEYOR_CACHE=0``): everything is compiled and built;
* **warm** (``--warm``): one cache folder per (variant, mode), filled by an
  unmeasured first process: Inductor's FX graph cache, AOTAutograd's cache
  (which serves ``torch.compile(m)`` whole) and conveyor's disk cache
  (``CONVEYOR_CACHE=1``, in that folder), as a user's second run finds them.

**Per call**: one more process builds every variant (from the first calls'
Inductor caches, merged) and calls them in turn, A B C D A B C D ... (Note
[Side by side]); the median over the rounds, as wall time and as the
process's CPU time (one thread: on an idle machine the two agree).

Ratios are against ``torch.compile(m)``; the last lines count Inductor's FX
graph cache hits, misses and bypasses of each first-call process.

Note [Bytecode of a warm run]: a warm first call is a user's second run, and
that run finds Python's bytecode cache filled too: torch's ``.pyc`` files
were written when it was installed, conveyor's (an editable install here)
when the first process imported it. A process that may not write bytecode
(``PYTHONDONTWRITEBYTECODE``, set in some environments) compiles every
conveyor module from source each time, about 0.1 s of each conveyor first
call that torch's modules never cost. So the warm processes may write and
read it (next to the sources, in ``__pycache__``, as any Python does); cold
runs keep the environment's setting.

Note [Side by side]: per-call times measured one variant after another, each
in its own process, compare one stretch of the machine's load with another.
On a shared machine that is most of the difference: the same code measured
0.64x and 0.92x of ``torch.compile(m)`` in two runs, and the training step
through ``torch.compile(backend="conveyor")`` 1.06x and 1.43x, while
alternating calls in one process gave 0.99 to 1.04x for all of them. So the
per-call figures come from one process that alternates the variants, each
call's load shared by its neighbours.

Run: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/inductor_backend.py``
(``--iters N``, ``--rounds N``, ``--only NAME``, ``--warm``, ``--no-per-call``).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

VARIANTS = ("eager", "torch.compile(m)", "conveyor inductor", "torch.compile conveyor inductor")
MODES = ("inference", "train")
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


def step(variant: str, mode: str, model: Any = None, x: Any = None) -> Callable[[], None]:
    """``model`` (a fresh one by default) compiled as ``variant``, and one call of it in ``mode``."""
    import torch

    x = torch.randn(BATCH, TOKENS, D) if x is None else x
    model = build() if model is None else model
    fn = compiled(variant, model)
    params = list(model.parameters())

    def call() -> None:
        if mode == "inference":
            with torch.no_grad():
                fn(x)
            return
        fn(x).square().mean().backward()
        for p in params:
            p.grad = None

    return call


def _cpu() -> tuple[float, float]:
    """CPU seconds of this process, and of its waited-for children (the C++ builds)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


def first_call(variant: str, mode: str) -> dict[str, float]:
    """The compile and first call of ``mode`` (wall and CPU seconds), the FX
    graph cache counters and the full garbage collections it ran."""
    import gc

    import torch

    torch.set_num_threads(1)
    x, model = torch.randn(BATCH, TOKENS, D), build()
    collections = [0]
    gc.callbacks.append(
        lambda phase, info: collections.__setitem__(0, collections[0] + (phase == "stop" and info["generation"] == 2))
    )
    start, (own, builds) = time.perf_counter(), _cpu()
    call = step(variant, mode, model, x)
    call()
    results = {"first": time.perf_counter() - start, "full gc": float(collections[0])}
    own, builds = (after - before for after, before in zip(_cpu(), (own, builds), strict=True))
    results["first cpu"], results["first own cpu"] = own + builds, own
    from torch._dynamo.utils import counters

    for k in ("hit", "miss", "bypass"):
        results[f"fx graph cache {k}"] = counters["inductor"][f"fxgraph_cache_{k}"]
    return results


def side_by_side(variants: list[str], iters: int) -> dict[str, dict[str, float]]:
    """Per-call wall and CPU seconds (medians), the variants called in turn (Note [Side by side])."""
    import torch

    torch.set_num_threads(1)
    results: dict[str, dict[str, float]] = {v: {} for v in variants}
    for mode in MODES:
        calls = {v: step(v, mode) for v in variants}
        for call in calls.values():
            for _ in range(4):  # the compile, then warm-up
                call()
        wall: dict[str, list[float]] = {v: [] for v in variants}
        cpu: dict[str, list[float]] = {v: [] for v in variants}
        for _ in range(iters):
            for v, call in calls.items():
                start, start_cpu = time.perf_counter(), time.process_time()
                call()
                wall[v].append(time.perf_counter() - start)
                cpu[v].append(time.process_time() - start_cpu)
        for v in variants:
            results[v][f"{mode} per call"] = statistics.median(wall[v])
            results[v][f"{mode} per call cpu"] = statistics.median(cpu[v])
    return results


def _child(args: list[str], cache_dir: str, warm: bool = False) -> Any:
    env = dict(os.environ, OMP_NUM_THREADS="1", CONVEYOR_PROGRESS="0", TORCHINDUCTOR_CACHE_DIR=cache_dir)
    env["CONVEYOR_CACHE"] = "0"
    if warm:  # conveyor's disk cache beside Inductor's, as AOTAutograd's cache serves torch.compile(m)
        env.update(CONVEYOR_CACHE="1", CONVEYOR_CACHE_DIR=os.path.join(cache_dir, "conveyor"))
        env.pop("PYTHONDONTWRITEBYTECODE", None)  # Note [Bytecode of a warm run]
    out = subprocess.run([sys.executable, __file__, *args], env=env, check=True, capture_output=True, text=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _programs(cache_dir: str) -> int:
    """How many programs conveyor's disk cache in ``cache_dir`` holds."""
    return sum(len(files) for _, _, files in os.walk(os.path.join(cache_dir, "conveyor")))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--iters", type=int, default=30, help="per-call rounds (each calls every variant once)")
    parser.add_argument("--rounds", type=int, default=3, help="first-call processes per variant and mode (median)")
    parser.add_argument("--only", choices=VARIANTS, action="append")
    parser.add_argument(
        "--warm", action="store_true", help="first calls with filled caches (Inductor's, AOTAutograd's, conveyor's)"
    )
    parser.add_argument("--no-per-call", action="store_true", help="first calls only")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--mode", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--side-by-side", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    variants = args.only or list(VARIANTS)
    if args.child:
        print(json.dumps(first_call(args.child, args.mode)))
        return
    if args.side_by_side:
        print(json.dumps(side_by_side(variants, args.iters)))
        return
    compiled_variants = [v for v in variants if v != "eager"]
    runs: dict[tuple[str, str], list[dict[str, float]]] = {(v, m): [] for v in compiled_variants for m in MODES}
    rows: dict[str, dict[str, float]] = {v: {} for v in variants}
    with tempfile.TemporaryDirectory() as top:
        merged = os.path.join(top, "merged")
        for r in range(args.rounds):
            for mode in MODES:
                for variant in compiled_variants:  # in turn: each round's load shared by every variant
                    child = ["--child", variant, "--mode", mode]
                    if args.warm:
                        cache = os.path.join(top, f"{variant}-{mode}".replace(" ", "_"))
                        if r == 0:
                            _child(child, cache, warm=True)  # fills the caches, not measured
                        before = _programs(cache)
                        got = _child(child, cache, warm=True)
                        got["conveyor programs stored"] = float(_programs(cache) - before)  # 0: served from disk
                        runs[variant, mode].append(got)
                    else:
                        cache = tempfile.mkdtemp(dir=top)
                        runs[variant, mode].append(_child(child, cache))
                        shutil.copytree(cache, merged, dirs_exist_ok=True)
                        shutil.rmtree(cache, ignore_errors=True)
                    print(f"  {variant} {mode}: first call, round {r + 1}", file=sys.stderr)
        for (variant, mode), got in runs.items():
            for k in got[0]:
                rows[variant][f"{mode} {k}"] = statistics.median(g[k] for g in got)
        if not args.no_per_call:
            only = [a for v in variants for a in ("--only", v)]
            for variant, per_call in _child(["--side-by-side", "--iters", str(args.iters), *only], merged).items():
                rows[variant].update(per_call)
            print("  per call: done", file=sys.stderr)
    report(rows, args)


def report(rows: dict[str, dict[str, float]], args: Any) -> None:
    base = rows.get("torch.compile(m)")
    cache = "warm" if args.warm else "cold"
    print(f"d={D}, {BLOCKS} blocks, batch {BATCH}x{TOKENS}, OMP_NUM_THREADS=1, load {os.getloadavg()[0]:.1f}")
    tables: list[tuple[str, tuple[str, ...], tuple[str, ...], float, str]] = [
        (
            f"first call, {cache} (compile + first call, fresh process; median of {args.rounds})",
            ("inference first", "train first"),
            ("", " cpu", " own cpu"),
            1.0,
            "s",
        )
    ]
    if not args.no_per_call:
        tables.insert(
            0,
            (
                f"per call, side by side (median of {args.iters})",
                ("inference per call", "train per call"),
                ("", " cpu"),
                1e3,
                "ms",
            ),
        )
    for title, columns, kinds, scale, unit in tables:
        print(title)
        heads = [c + kind for c in columns for kind in kinds]
        print(f"{'':34}" + "".join(f"{h:>28}" for h in heads))
        for variant, row in rows.items():
            if heads[0] not in row:
                continue
            cells = []
            for c in heads:
                ratio = f" ({row[c] / base[c]:.2f}x)" if base and base.get(c) else ""
                cells.append(f"{row[c] * scale:.2f} {unit}{ratio}")
            print(f"{variant:34}" + "".join(f"{cell:>28}" for cell in cells))
    print("Inductor's FX graph cache (median per first-call process): hit / miss / bypass; full GCs in the first call")
    for variant, row in rows.items():
        for mode in MODES:
            if f"{mode} fx graph cache hit" in row:
                counts = " / ".join(str(int(row[f"{mode} fx graph cache {k}"])) for k in ("hit", "miss", "bypass"))
                stored = row.get(f"{mode} conveyor programs stored")
                disk = (
                    ""
                    if stored is None or variant == "torch.compile(m)"
                    else f"; conveyor programs compiled {stored:g}"
                )
                print(f"  {variant:32} {mode:10} {counts}; {int(row[f'{mode} full gc'])}{disk}")


if __name__ == "__main__":
    main()
