"""The persistent compile cache: a second process's first call against a cold one.

For each program, interleaved rounds of fresh processes (``OMP_NUM_THREADS=1``):

* cold: ``conveyor.compile`` with an empty cache folder (capture, the whole
  pipeline, and the store);
* warm: a second process with the folder the cold one filled (capture, and
  the program loaded from disk);
* off: a fresh process with the cache switched off (``CONVEYOR_CACHE=0``):
  cold minus off is what keying and storing cost a cold compile;
* aot_eager: PyTorch's own equivalent, ``torch.compile(backend="aot_eager")``
  in a fresh process (it has no persistent cache of its own to warm).

Each figure is the time of the first call in its process (imports and model
construction excluded), the minimum over the rounds; the ratio warm / cold is
the goal (≤ 0.25). The split (capture vs. pipeline or load) says where a
warm first call goes.

Run: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/disk_cache.py``
(``--rounds N``, ``--no-hf`` to skip the Hugging Face model).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

PROGRAMS = ("12-block MLP train step", "12-block MLP no_grad", "gpt2 forward no_grad", "gpt2 train step")


# -- the child: one first call ------------------------------------------------------
def _build(program: str) -> tuple[Any, Callable[[Any], Any], tuple[Any, ...]]:
    """``(module, step(compiled module) -> callable, args)``."""
    import torch

    sys.path.insert(0, str(Path(__file__).parent))
    torch.manual_seed(0)
    if program.startswith("12-block"):
        from overhead import residual_mlp

        model, args = residual_mlp(), (torch.randn(16, 64),)
    else:
        import transformers

        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        config = transformers.GPT2Config(
            n_embd=64, n_layer=2, n_head=4, vocab_size=100, bos_token_id=0, eos_token_id=0,
            resid_pdrop=0, embd_pdrop=0, attn_pdrop=0, use_cache=False,
        )
        model, args = transformers.GPT2LMHeadModel(config), (torch.randint(0, 100, (2, 16)),)

    def logits(out: Any) -> Any:
        return out.logits if hasattr(out, "logits") else out

    if program.endswith("train step"):
        def step(compiled: Any) -> Callable[..., Any]:
            def run(*a: Any) -> None:
                logits(compiled(*a)).sum().backward()

            return run
    else:
        def step(compiled: Any) -> Callable[..., Any]:
            def run(*a: Any) -> Any:
                with torch.no_grad():
                    return logits(compiled(*a))

            return run

    return model, step, args


def child(program: str, kind: str) -> dict[str, float]:
    import torch

    torch.set_num_threads(1)
    import conveyor
    import conveyor.compiled as compiled_module

    split: dict[str, float] = {}

    def timed(name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapper(*a: Any, **k: Any) -> Any:
            t0 = time.perf_counter()
            try:
                return fn(*a, **k)
            finally:
                split[name] = split.get(name, 0.0) + (time.perf_counter() - t0) * 1e3

        return wrapper

    for name, attr in (("capture", "capture"), ("pipeline or load", "compile_program")):
        if hasattr(compiled_module, attr):  # the split is best effort: names inside conveyor.compiled
            setattr(compiled_module, attr, timed(name, getattr(compiled_module, attr)))
    model, step, args = _build(program)
    if kind == "aot_eager":
        fn = step(torch.compile(model, backend="aot_eager"))
    else:
        fn = step(conveyor.compile(model))
    t0 = time.perf_counter()
    fn(*args)
    first = (time.perf_counter() - t0) * 1e3
    return {"first": first, **(split if kind != "aot_eager" else {})}


# -- the parent: rounds of fresh processes -------------------------------------------
def run_child(program: str, kind: str, cache_dir: str) -> dict[str, float]:
    switch = "0" if kind == "off" else "1"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CONVEYOR_CACHE": switch, "CONVEYOR_CACHE_DIR": cache_dir}
    out = subprocess.run(
        [sys.executable, __file__, "--child", program, kind], env=env, capture_output=True, text=True, check=False
    )
    if out.returncode != 0:
        raise RuntimeError(f"{program} ({kind}) failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--no-hf", action="store_true", help="skip the Hugging Face model")
    parser.add_argument("--child", nargs=2, help=argparse.SUPPRESS)
    opts = parser.parse_args()
    if opts.child:
        print(json.dumps(child(*opts.child)))
        return
    programs = [p for p in PROGRAMS if not (opts.no_hf and p.startswith("gpt2"))]
    import conveyor
    import torch

    print(f"torch {torch.__version__}, conveyor {conveyor.__version__}, OMP_NUM_THREADS=1, {opts.rounds} rounds")
    print("first call in a fresh process, ms (minimum over rounds); split: capture + pipeline (cold) / load (warm)")
    print(
        f"{'program':26} {'aot_eager':>9} {'off':>6} {'cold':>6} {'warm':>6} {'warm/cold':>9}"
        "   cold split      warm split"
    )
    for program in programs:
        best: dict[str, dict[str, float]] = {}
        for _ in range(opts.rounds):  # interleaved: cold, warm, off, aot_eager
            with tempfile.TemporaryDirectory(prefix="conveyor-bench-cache-") as folder:
                for kind in ("cold", "warm", "off", "aot_eager"):
                    r = run_child(program, kind, folder)
                    if kind not in best or r["first"] < best[kind]["first"]:
                        best[kind] = r
        cold, warm, off, aot = best["cold"], best["warm"], best["off"], best["aot_eager"]

        def split(r: dict[str, float]) -> str:
            return f"{r.get('capture', float('nan')):5.0f} + {r.get('pipeline or load', float('nan')):5.0f}"

        print(
            f"{program:26} {aot['first']:9.0f} {off['first']:6.0f} {cold['first']:6.0f} {warm['first']:6.0f} "
            f"{warm['first'] / cold['first']:9.2f}   {split(cold)}   {split(warm)}"
        )


if __name__ == "__main__":
    main()
