"""The PTX of every kernel the triton backend generates for a set of models.

Each model runs through ``conveyor.compile(model, backend="triton")`` on CPU
(Triton's interpreter); every launch is recorded as Triton's JIT would compile
it (``conveyor_triton.aot``), and each distinct kernel is compiled ahead of
time by the real Triton compiler for sm_90 (no GPU needed). Per model and pass
(``forward``: eval under no_grad; ``train``: forward + backward of the loss):

* launches: generated kernels launched (aten calls not counted), and the
  distinct kernels among them (distinct source, specialization and options);
* no vec: distinct kernels without a single vectorized global load or store;
* ld v/s, st v/s: vectorized (``ld.global.v2/v4``) against scalar global loads
  and stores, PTX instructions summed over the distinct kernels;
* div/rem: integer divisions and remainders in the PTX;
* max regs, spilling: ptxas's registers per thread, kernels that spill;
* MB: bytes moved by the whole step (kernels and aten calls,
  ``conveyor_triton.metrics``).

Launches are configured as on a GPU (``aot.gpu_launch_config`` sets the stage's ``launch_for``: the block
sizes and warps the backend would choose for CUDA tensors), not with the
interpreter's huge blocks (``--interpreter-blocks`` keeps those).

The total row counts each distinct kernel once over all models.

    .venv/bin/python benchmarks/triton_ptx.py [--models mlp,gpt2] [--json out.json]
"""

from __future__ import annotations

import os
import sys
import tempfile

os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton (CPU only here)
os.environ.setdefault("HF_HUB_OFFLINE", "1")
_TMP = tempfile.mkdtemp(prefix="conveyor-ptx-")
os.environ["CONVEYOR_TRITON_CACHE"] = os.path.join(_TMP, "conveyor")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import json  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import asdict, dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import conveyor  # noqa: E402
import torch  # noqa: E402
from bench_models import MLP, NormBlock, encoder  # noqa: E402
from conveyor_triton import aot, metrics  # noqa: E402
from torch import nn  # noqa: E402

# ---------------------------------------------------------------------------
# Models: (build, inputs, loss of the output)


def _hf(kind: str) -> nn.Module:
    import transformers

    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from hf_harness import no_dropout

    transformers.logging.set_verbosity_error()
    if kind == "gpt2":
        config: Any = transformers.GPT2Config(vocab_size=96, n_embd=64, n_layer=2, n_head=4, n_positions=128)
        config._attn_implementation = "eager"
        return transformers.GPT2LMHeadModel(no_dropout(config))
    if kind == "llama":
        config = transformers.LlamaConfig(
            vocab_size=96, hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=128,
        )
        config._attn_implementation = "eager"
        return transformers.LlamaForCausalLM(no_dropout(config))
    if kind == "bert":
        config = transformers.BertConfig(
            vocab_size=96, hidden_size=64, num_hidden_layers=2, num_attention_heads=4, intermediate_size=128,
            max_position_embeddings=64,
        )
        return transformers.BertForMaskedLM(no_dropout(config))
    config = transformers.ViTConfig(
        image_size=32, patch_size=4, num_channels=3, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
        intermediate_size=128, num_labels=5,
    )
    return transformers.ViTForImageClassification(no_dropout(config))


def _ids() -> dict[str, Any]:
    # hidden sizes are multiples of 16, as in real models; sequences are not
    # (as real prompts are not): 23 tokens, ViT 65 (64 patches and the class token)
    ids = torch.randint(3, 96, (4, 23))
    return {"input_ids": ids, "labels": ids}


@dataclass(frozen=True)
class Model:
    build: Callable[[], nn.Module]
    inputs: Callable[[], dict[str, Any]]
    loss: Callable[[Any], torch.Tensor]


def _x(*shape: int) -> Callable[[], dict[str, Any]]:
    return lambda: {"": torch.randn(*shape)}  # "": the one positional argument


MODELS: dict[str, Model] = {
    "mlp": Model(MLP, _x(8, 64, 256), lambda out: out.sum()),
    "layernorm_gelu_softmax": Model(NormBlock, _x(8, 64, 256), lambda out: out.sum()),
    "transformer_encoder_layer": Model(encoder, _x(8, 64, 256), lambda out: out.sum()),
    # rows past a persistent tile (4096): looped reductions (Note [Reduction passes] in conveyor_triton.codegen_reduce)
    "layernorm_softmax_8192": Model(lambda: NormBlock(8192), _x(4, 8, 8192), lambda out: out.sum()),
    "gpt2": Model(lambda: _hf("gpt2"), _ids, lambda out: out.loss),
    "llama": Model(lambda: _hf("llama"), _ids, lambda out: out.loss),
    "bert": Model(lambda: _hf("bert"), _ids, lambda out: out.loss),
    "vit": Model(
        lambda: _hf("vit"),
        lambda: {"pixel_values": torch.randn(4, 3, 32, 32), "labels": torch.arange(4) % 5},
        lambda out: out.loss,
    ),
}


# ---------------------------------------------------------------------------
# Running


@dataclass
class Run:
    model: str
    part: str
    launches: int
    bytes: int
    keys: list[str]
    seconds: float


def run(name: str, part: str, recorder_of: dict[str, aot.Launch], gpu: bool) -> Run:
    spec = MODELS[name]
    torch.manual_seed(0)
    torch._dynamo.reset()
    model = spec.build()
    kwargs = spec.inputs()
    args = (kwargs.pop(""),) if "" in kwargs else ()
    recorder = aot.Recorder()
    start = time.perf_counter()
    with warnings.catch_warnings(), aot.gpu_launch_config() if gpu else contextlib.nullcontext():
        warnings.simplefilter("ignore")
        if part == "forward":
            model.eval()
            compiled = conveyor.compile(model, backend="triton")
            kwargs.pop("labels", None)
            with torch.no_grad(), metrics.watching_launches(recorder), metrics.counting() as counters:
                compiled(*args, **kwargs)
        else:
            model.train()
            compiled = conveyor.compile(model, backend="triton")
            with metrics.watching_launches(recorder), metrics.counting() as counters:
                spec.loss(compiled(*args, **kwargs)).backward()
    if recorder.failures:
        raise RuntimeError(f"{name} {part}: launches that could not be described:\n" + "\n".join(recorder.failures))
    keys = []
    for launch in recorder.launches():
        recorder_of.setdefault(launch.key, launch)
        keys.append(launch.key)
    return Run(name, part, counters.kernels, counters.bytes, keys, time.perf_counter() - start)


def _row(label: str, part: str, launches: int | str, keys: list[str], results: dict[str, aot.Result], mb: str) -> str:
    s = aot.Summary()
    for k in keys:
        s.add(results[k])
    spill = f"{len(s.spilling)}" + (f" ({', '.join(sorted(set(s.spilling)))})" if s.spilling else "")
    return (
        f"| {label} | {part} | {launches} | {s.kernels} | {s.no_vector} | {s.loads_vector}/{s.loads_scalar} "
        f"| {s.stores_vector}/{s.stores_scalar} | {s.int_divs} | {s.max_registers} | {spill} | {mb} |"
    )


def _head() -> str:
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True,
                             cwd=Path(__file__).parent, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], capture_output=True,
                               text=True, cwd=Path(__file__).parent, check=True)
        return out.stdout.strip() + (" (with uncommitted changes)" if dirty.stdout.strip() else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--models", default=",".join(MODELS), help=f"comma-separated, of: {', '.join(MODELS)}")
    p.add_argument("--parts", default="forward,train", help="forward, train or both")
    p.add_argument("--arch", type=int, default=90, help="compute capability to compile for (default 90)")
    p.add_argument("--workers", type=int, default=None, help="compile processes (default: half the CPUs)")
    p.add_argument("--interpreter-blocks", action="store_true",
                   help="record the launches the interpreter makes (huge blocks) instead of a GPU's")
    p.add_argument("--json", metavar="PATH", help="write the figures and per-kernel stats here")
    a = p.parse_args(argv)
    names = [m for m in a.models.split(",") if m]
    unknown = [m for m in names if m not in MODELS]
    if unknown:
        p.error(f"unknown models {unknown}; choose from {list(MODELS)}")
    reason = aot.unavailable()
    if reason:
        print(reason, file=sys.stderr)
        return 2

    launches: dict[str, aot.Launch] = {}
    runs = []
    for name in names:
        for part in a.parts.split(","):
            r = run(name, part, launches, gpu=not a.interpreter_blocks)
            print(f"{name} {part}: {r.launches} launches, {len(r.keys)} distinct, {r.seconds:.1f} s", file=sys.stderr)
            runs.append(r)
    start = time.perf_counter()
    compiled = aot.compile_launches(launches.values(), archs=(a.arch,), workers=a.workers)
    compile_s = time.perf_counter() - start
    results = {r.key: r for r in compiled}

    import triton

    blocks = "the interpreter's launches" if a.interpreter_blocks else "launches as on a GPU"
    print(f"conveyor {_head()}, Triton {triton.__version__}, sm_{a.arch}, {blocks}: {len(launches)} distinct "
          f"kernels compiled in {compile_s:.1f} s")
    print()
    header = ("| model | pass | launches | distinct | no vec | ld v/s | st v/s | div/rem | max regs "
              "| spilling | MB |")
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for r in runs:
        print(_row(r.model, r.part, r.launches, r.keys, results, f"{r.bytes / 1e6:.2f}"))
    total = aot.summarize(compiled, a.arch)
    print(_row("total", "", sum(r.launches for r in runs), list(results), results,
               f"{sum(r.bytes for r in runs) / 1e6:.2f}"))
    print()
    print(f"kernels with no vectorized global access: {total.no_vector}/{total.kernels - total.errors} "
          f"({total.pct_no_vector:.0f}%); global loads vectorized: {total.loads_vector}/"
          f"{total.loads_vector + total.loads_scalar} ({total.pct_loads_vectorized:.0f}%); "
          f"stores vectorized: {total.stores_vector}/{total.stores_vector + total.stores_scalar}")
    ok = [r for r in compiled if r.stats]
    if ok:
        divs = sorted(r.stats.int_divs for r in ok if r.stats)
        print(f"integer div/rem per kernel: median {divs[len(divs) // 2]}, max {divs[-1]}")
        spills = [r for r in ok if r.stats and r.stats.spills]
        for r in spills:
            assert r.stats is not None
            print(f"spills: {r.name}: {r.stats.registers} registers, {r.stats.spill_stores} B spill stores, "
                  f"{r.stats.spill_loads} B spill loads")
    errs = aot.errors(compiled)
    if errs:
        print("\ncompile errors:\n" + errs)
    if a.json:
        Path(a.json).write_text(json.dumps({
            "head": _head(),
            "triton": triton.__version__,
            "arch": a.arch,
            "runs": [asdict(r) for r in runs],
            "total": {**asdict(total), "pct_no_vector": total.pct_no_vector,
                      "pct_loads_vectorized": total.pct_loads_vectorized},
            "kernels": {k: {**results[k].to_json(), "source": launches[k].source} for k in results},
        }, indent=1))
    return 1 if errs else 0


if __name__ == "__main__":
    sys.exit(main())
