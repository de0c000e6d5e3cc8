"""Per-call overhead and compile time of conveyor, side by side with AOTAutograd.

One run measures, for each program, against torch's own equivalent in the same
process:

* per-call overhead over eager (µs): ``torch.compile(backend="aot_eager")``,
  ``conveyor.compile`` and ``torch.compile(backend="conveyor")``, each the
  minimum over interleaved rounds of calls (in a new order each round) minus
  eager's minimum; and dynamo's own floor (``torch.compile`` with a backend
  that runs dynamo's graph as it is), which neither backend behind dynamo can
  go below. Calls are timed in the thread's CPU time (``time.thread_time``):
  on a shared machine wall time counts the time other processes hold the
  core, CPU time does not (``--wall`` times wall clock instead);
* first call (ms): a fresh compile through each entry point;
* backend compile time behind dynamo (dynamo's own tracing excluded: only the
  time inside the backend callable), conveyor / aot_eager, on small Hugging
  Face models (forward, and a training step) when ``transformers`` is
  installed.

Programs: a 3-tensor pointwise function, an MLP training step, a 12-block
residual MLP (LayerNorm, Linear, GELU) under ``no_grad`` and as a training step.

Run: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/overhead.py`` (a few
minutes on 2 cores). ``--quick`` runs fewer rounds; ``--only 12-block`` runs
only the programs so named; ``--no-hf`` skips the Hugging Face ratios;
``--compare '{"stages": {"autograd": {"partitioner": "min_cut"}}}'`` also times
both conveyor entry points with those options, interleaved with the others in
the same rounds (a before/after of a configuration in one process). Timings
on a shared machine swing; the minimum over interleaved rounds of CPU time is
the stable figure.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import time
import timeit
from collections.abc import Callable
from typing import Any

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("CONVEYOR_CACHE", "0")  # first calls compile (the disk cache: benchmarks/disk_cache.py)

import conveyor  # noqa: E402
import torch  # noqa: E402
import torch._dynamo  # noqa: E402
from torch._dynamo.backends.registry import lookup_backend, register_backend  # noqa: E402

torch.set_num_threads(1)


# -- programs ---------------------------------------------------------------
def pointwise(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    return (a * b + c).relu()


class Block(torch.nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.norm = torch.nn.LayerNorm(d)
        self.fc = torch.nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.nn.functional.gelu(self.fc(self.norm(x)))


def residual_mlp(blocks: int = 12, d: int = 64) -> torch.nn.Module:
    return torch.nn.Sequential(*(Block(d) for _ in range(blocks)))


def mlp() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))


def train_step(model: Callable[..., torch.Tensor], params: list[torch.Tensor]) -> Callable[[torch.Tensor], None]:
    def step(x: torch.Tensor) -> None:
        model(x).sum().backward()
        for p in params:
            p.grad = None

    return step


def inference(model: Callable[..., torch.Tensor]) -> Callable[[torch.Tensor], torch.Tensor]:
    def run(x: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return model(x)

    return run


# -- one row ----------------------------------------------------------------
def row(
    name: str,
    build: Callable[[str], Callable[..., Any]],
    args: tuple[Any, ...],
    rounds: int,
    calls: int,
    timer: Callable[[], float],
    extra: tuple[str, ...] = (),
) -> dict[str, Any]:
    """``build(kind)`` returns the callable for kind in eager / aot_eager /
    conveyor.compile / torch.compile(conveyor) / dynamo floor (and the
    ``extra`` kinds), built fresh (not yet called)."""
    kinds = ["eager", "aot_eager", "conveyor.compile", "torch.compile(conveyor)", "dynamo floor", *extra]
    first: dict[str, float] = {}
    fns: dict[str, Callable[..., Any]] = {}
    for kind in kinds:
        torch._dynamo.reset()
        fn = build(kind)
        t0 = time.perf_counter()
        fn(*args)
        first[kind] = (time.perf_counter() - t0) * 1e3
        fns[kind] = fn
    for fn in fns.values():  # warm: recompiles for .grad defined etc. happen here
        for _ in range(3):
            fn(*args)
    best = {k: float("inf") for k in kinds}
    order = random.Random(0)
    for _ in range(rounds):  # interleaved, in a new order each round (a fixed order favours some places)
        for kind in order.sample(kinds, len(kinds)):
            fn = fns[kind]
            t = timeit.Timer(lambda fn=fn: fn(*args), timer=timer).timeit(number=calls)
            best[kind] = min(best[kind], t / calls * 1e6)
    over = {k: best[k] - best["eager"] for k in kinds[1:]}
    return {"name": name, "over": over, "first": first, "eager_us": best["eager"]}


def _dynamo_graph_as_is(gm: torch.fx.GraphModule, example_inputs: Any) -> Callable[..., Any]:
    return gm.forward


#: conveyor's options for the ``--compare`` kinds
COMPARED: dict[str, Any] = {}


def compiled(kind: str, target: Any) -> Callable[..., Any]:
    if kind == "conveyor.compile --compare":
        return conveyor.compile(target, **COMPARED)
    if kind == "torch.compile(conveyor) --compare":
        return torch.compile(target, backend="conveyor", options=COMPARED)
    if kind == "eager":
        return target
    if kind == "aot_eager":
        return torch.compile(target, backend="aot_eager")
    if kind == "conveyor.compile":
        return conveyor.compile(target)
    if kind == "dynamo floor":
        return torch.compile(target, backend=_dynamo_graph_as_is)
    return torch.compile(target, backend="conveyor")


def programs() -> list[tuple[str, Callable[[str], Callable[..., Any]], tuple[Any, ...]]]:
    pw_args = tuple(torch.randn(64, 64) for _ in range(3))

    def build_pointwise(kind: str) -> Callable[..., Any]:
        return compiled(kind, pointwise)

    def build_mlp_train(kind: str) -> Callable[..., Any]:
        torch.manual_seed(0)
        m = mlp()
        return train_step(compiled(kind, m), list(m.parameters()))

    def build_res_inference(kind: str) -> Callable[..., Any]:
        torch.manual_seed(0)
        m = residual_mlp()
        return inference(compiled(kind, m))

    def build_res_train(kind: str) -> Callable[..., Any]:
        torch.manual_seed(0)
        m = residual_mlp()
        return train_step(compiled(kind, m), list(m.parameters()))

    return [
        ("3-tensor pointwise fn", build_pointwise, pw_args),
        ("MLP train step", build_mlp_train, (torch.randn(16, 32),)),
        ("12-block residual MLP, no_grad", build_res_inference, (torch.randn(16, 64),)),
        ("12-block residual MLP, train step", build_res_train, (torch.randn(16, 64),)),
    ]


# -- backend compile time behind dynamo --------------------------------------
_backend_seconds: dict[str, float] = {}


def _timed(name: str) -> Callable[..., Any]:
    inner = lookup_backend(name)

    def backend(gm: torch.fx.GraphModule, example_inputs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return inner(gm, example_inputs)
        finally:
            _backend_seconds[name] = _backend_seconds.get(name, 0.0) + time.perf_counter() - t0

    return backend


def hf_models() -> list[tuple[str, Callable[[], torch.nn.Module], Callable[[], dict[str, torch.Tensor]]]]:
    try:
        import transformers
    except ImportError:
        return []
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    small = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "intermediate_size": 128}

    def ids() -> dict[str, torch.Tensor]:
        return {"input_ids": torch.randint(0, 100, (2, 16))}

    def gpt2() -> torch.nn.Module:
        cfg = transformers.GPT2Config(n_embd=64, n_layer=2, n_head=4, vocab_size=100, bos_token_id=0, eos_token_id=0, resid_pdrop=0, embd_pdrop=0, attn_pdrop=0, use_cache=False)
        return transformers.GPT2LMHeadModel(cfg)

    def llama() -> torch.nn.Module:
        cfg = transformers.LlamaConfig(vocab_size=100, num_key_value_heads=2, use_cache=False, **small)
        return transformers.LlamaForCausalLM(cfg)

    def bert() -> torch.nn.Module:
        cfg = transformers.BertConfig(vocab_size=100, hidden_dropout_prob=0, attention_probs_dropout_prob=0, **small)
        return transformers.BertForMaskedLM(cfg)

    return [("gpt2", gpt2, ids), ("llama", llama, ids), ("bert", bert, ids)]


def backend_compile_ratios() -> list[tuple[str, float, float]]:
    for name in ("aot_eager", "conveyor"):
        register_backend(name=f"timed_{name}")(_timed(name))
    rows = []
    for model_name, build, inputs in hf_models():
        for mode in ("forward", "train"):
            seconds = {}
            for backend in ("aot_eager", "conveyor"):
                torch._dynamo.reset()
                _backend_seconds.clear()
                torch.manual_seed(0)
                model = build()
                fn = torch.compile(model, backend=f"timed_{backend}")
                if mode == "forward":
                    with torch.no_grad():
                        fn(**inputs())
                else:
                    fn(**inputs()).logits.sum().backward()
                seconds[backend] = _backend_seconds.get(backend, 0.0)
            rows.append((f"{model_name} {mode}", seconds["aot_eager"] * 1e3, seconds["conveyor"] * 1e3))
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer rounds (a smoke run)")
    parser.add_argument("--no-hf", action="store_true", help="skip the Hugging Face backend compile ratios")
    parser.add_argument("--wall", action="store_true", help="time wall clock, not the thread's CPU time")
    parser.add_argument("--only", action="append", metavar="TEXT", help="only the programs whose name contains TEXT")
    parser.add_argument("--compare", metavar="JSON", help="also time both conveyor entry points with these options")
    opts = parser.parse_args()
    extra: tuple[str, ...] = ()
    if opts.compare:
        COMPARED.update(json.loads(opts.compare))
        extra = ("conveyor.compile --compare", "torch.compile(conveyor) --compare")
    rounds, calls = (2, 10) if opts.quick else (15, 100)
    timer = time.perf_counter if opts.wall else time.thread_time
    print(f"torch {torch.__version__}, conveyor {conveyor.__version__}, threads {torch.get_num_threads()}")
    clock = "wall clock" if opts.wall else "thread CPU time"
    print(f"\nper-call overhead over eager, µs, {clock} (ratio conveyor / aot_eager); first call, ms")
    print(
        f"{'program':36} {'eager µs':>9} {'aot_eager':>10} {'conveyor.compile':>17} {'torch.compile(cv)':>18}"
        f" {'dynamo floor':>13}   first ms: aot / cv.compile / tc(cv)"
    )
    for name, build, args in programs():
        if opts.only and not any(text in name for text in opts.only):
            continue
        r = row(name, build, args, rounds, calls, timer, extra)
        o, f = r["over"], r["first"]
        aot = o["aot_eager"]
        print(
            f"{name:36} {r['eager_us']:9.0f} {aot:10.0f} "
            f"{o['conveyor.compile']:8.0f} ({o['conveyor.compile'] / aot:4.2f}x) "
            f"{o['torch.compile(conveyor)']:9.0f} ({o['torch.compile(conveyor)'] / aot:4.2f}x)"
            f" {o['dynamo floor']:13.0f}"
            f"   {f['aot_eager']:.0f} / {f['conveyor.compile']:.0f} / {f['torch.compile(conveyor)']:.0f}"
        )
        if extra:
            cv, tc = (o[kind] for kind in extra)
            print(
                f"{'  with --compare':36} {'':9} {'':10} {cv:8.0f} ({cv / aot:4.2f}x) {tc:9.0f} ({tc / aot:4.2f}x)"
                f" {'':13}   first ms: cv.compile / tc(cv) {f[extra[0]]:.0f} / {f[extra[1]]:.0f}"
            )
    ratios = [] if opts.no_hf else backend_compile_ratios()
    if ratios:
        print("\nbackend compile time behind dynamo (dynamo excluded), ms")
        print(f"{'model':16} {'aot_eager':>10} {'conveyor':>10} {'ratio':>6}")
        for name, aot_ms, cv_ms in ratios:
            print(f"{name:16} {aot_ms:10.0f} {cv_ms:10.0f} {cv_ms / aot_ms:6.2f}")
    else:
        print("\n(transformers not installed: no backend compile ratios)")


if __name__ == "__main__":
    main()
