"""On a CUDA GPU: conveyor's triton backend checked against eager, then timed
side by side with eager and TorchInductor, in one run.

Each workload is first checked with ``conveyor.testing.check`` (outputs,
aliasing, inputs after the call, gradients), then each of eager,
``conveyor.compile(..., backend="triton")`` and ``torch.compile`` (Inductor)
is timed with CUDA events: the median of ``--reps`` calls after warm-up
calls, forward only for inference rows and forward + backward for training
rows. Ratios are against eager on the same GPU in the same run.

Hugging Face models (gpt2, bert, llama, ViT from small configs with random
weights, dropout off) join when ``transformers`` imports; their training rows
time forward and backward of the model's loss. ``--only`` picks workloads by
substring, ``--systems`` the columns (``conveyor`` alone compares two trees
of conveyor run one after the other on the same machine).

    TRITON_INTERPRET=0 python benchmarks/gpu.py [--reps 50] [--only gpt2,softmax] [--systems eager,conveyor,inductor]
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


class _Loss(torch.nn.Module):
    """A Hugging Face model called on fixed keyword inputs, returning its loss
    (training) or its logits (inference)."""

    def __init__(self, model: torch.nn.Module, train: bool) -> None:
        super().__init__()
        self.model, self.train_loss = model, train

    def forward(self, **kwargs: Any) -> torch.Tensor:
        out = self.model(**kwargs)
        return out.loss if self.train_loss else out.logits


def _hf(dev: str) -> list[tuple[str, Any, tuple[Any, ...], dict[str, Any], bool]]:
    try:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        import transformers
    except ImportError as exc:
        print(f"Hugging Face models skipped: {exc}", file=sys.stderr)
        return []
    transformers.logging.set_verbosity_error()
    g = torch.Generator().manual_seed(0)
    tokens = torch.randint(0, 512, (8, 128), generator=g).to(dev)
    images = torch.randn(8, 3, 64, 64, generator=g).to(dev)
    labels = torch.randint(0, 10, (8,), generator=g).to(dev)
    nodrop = {"attn_implementation": "eager"}
    made = {
        "gpt2": lambda: transformers.GPT2LMHeadModel(
            transformers.GPT2Config(vocab_size=512, n_embd=256, n_layer=2, n_head=4, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, **nodrop)
        ),
        "bert": lambda: transformers.BertForMaskedLM(
            transformers.BertConfig(vocab_size=512, hidden_size=256, num_hidden_layers=2, num_attention_heads=4, intermediate_size=1024, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **nodrop)
        ),
        "llama": lambda: transformers.LlamaForCausalLM(
            transformers.LlamaConfig(vocab_size=512, hidden_size=256, intermediate_size=688, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, **nodrop)
        ),
        "vit": lambda: transformers.ViTForImageClassification(
            transformers.ViTConfig(image_size=64, patch_size=8, hidden_size=256, num_hidden_layers=2, num_attention_heads=4, intermediate_size=1024, num_labels=10, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, **nodrop)
        ),
    }
    rows = []
    for name, make in made.items():
        inputs = {"pixel_values": images, "labels": labels} if name == "vit" else {"input_ids": tokens, "labels": tokens}
        for train in (False, True):
            torch.manual_seed(0)
            model = make().to(dev).train(train).requires_grad_(train)
            rows.append((f"{name} {'train' if train else 'forward'}", _Loss(model, train), (), inputs, train))
    return rows


def workloads(dev: str) -> list[tuple[str, Any, tuple[Any, ...], dict[str, Any], bool]]:
    """(name, function or module, inputs, keyword inputs, train)."""
    return [(n, f, a, {}, t) for n, f, a, t in _basic(dev)] + _hf(dev)


def _basic(dev: str) -> list[tuple[str, Any, tuple[Any, ...], bool]]:
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


def _timed(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], train: bool, reps: int) -> float:
    def step() -> None:
        out = fn(*args, **kwargs)
        if train:
            (out if out.dim() == 0 else out.float().square().mean()).backward()

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


def _profile(name: str, label: str, fn: Any, args: tuple[Any, ...], kwargs: dict[str, Any], train: bool) -> None:
    """The top CUDA and CPU time of five steps of ``fn``, and the step's wall time split."""
    from torch.profiler import ProfilerActivity, profile

    def step() -> None:
        out = fn(*args, **kwargs)
        if train:
            (out if out.dim() == 0 else out.float().square().mean()).backward()

    step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(5):
            step()
        torch.cuda.synchronize()
    events = prof.key_averages()
    cuda = sum(e.self_device_time_total for e in events) / 5 / 1e3
    print(f"\n== profile {name} / {label}: {cuda:.3f} ms of GPU time per step, {len(prof.events()) // 5} events per step")
    print(events.table(sort_by="self_device_time_total", row_limit=12, max_name_column_width=60))


def _system(label: str, fn: Any) -> Any:
    if label == "eager":
        return fn
    if label == "conveyor":
        return conveyor.compile(fn, backend="triton")
    if label == "conveyor_graphs":  # Note [CUDA graphs] in conveyor_triton.cuda_graphs
        return conveyor.compile(fn, backend="triton", stages={"triton": {"cuda_graphs": True}})
    if label == "inductor":
        return torch.compile(fn)
    raise ValueError(f"unknown system {label!r} (eager, conveyor, conveyor_graphs, inductor)")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=50)
    parser.add_argument("--only", default="", help="comma-separated substrings of workload names (_ for a space)")
    parser.add_argument(
        "--systems", default="eager,conveyor,inductor", help="columns to time (also conveyor_graphs: cuda_graphs on)"
    )
    parser.add_argument("--no-check", action="store_true", help="time only")
    parser.add_argument("--profile", action="store_true", help="after timing, a profile of each system's step (top ops)")
    opts = parser.parse_args()
    if not torch.cuda.is_available():
        print("no CUDA device: this benchmark needs one", file=sys.stderr)
        return 2
    import triton

    print(f"torch {torch.__version__}, triton {triton.__version__}, {torch.cuda.get_device_name()}, conveyor {conveyor.__file__}")
    systems = opts.systems.split(",")
    wanted = [w.replace("_", " ") for w in opts.only.split(",") if w]  # "gpt2_train" for "gpt2 train"
    failures = 0
    rows = []
    try:
        for name, fn, args, kwargs, train in workloads("cuda"):
            if wanted and not any(w in name for w in wanted):
                continue
            inputs = tuple(a.requires_grad_() if train and isinstance(a, torch.Tensor) else a for a in args)

            def checked(compiled: Any, fn: Any = fn, kwargs: dict[str, Any] = kwargs, inputs: tuple[Any, ...] = inputs) -> str:
                try:
                    check(
                        lambda *xs: fn(*xs, **kwargs),
                        *inputs,
                        compile=lambda f: (lambda *xs: compiled(*xs, **kwargs)),
                        atol=1e-3,
                        rtol=1e-3,
                    )
                    return "exact"
                except Exception as exc:  # reported, and the run goes on to the next workload
                    traceback.print_exc()
                    return f"FAILED: {type(exc).__name__}: {str(exc).splitlines()[0][:200] if str(exc) else ''}"

            verdict = "-"
            if "conveyor" in systems and not opts.no_check:
                verdict = checked(conveyor.compile(fn, backend="triton"))
            times: dict[str, float] = {}
            for label in systems:
                try:
                    compiled = _system(label, fn)
                    times[label] = _timed(compiled, inputs, kwargs, train, opts.reps)
                except Exception as exc:
                    times[label] = float("nan")
                    print(f"{name}: {label} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
                    continue
                if opts.profile:
                    try:
                        _profile(name, label, compiled, inputs, kwargs, train)
                    except Exception as exc:  # a profile is extra: report and go on
                        print(f"{name}: {label} profile failed: {type(exc).__name__}: {exc}", file=sys.stderr)
                if label.startswith("conveyor") and not opts.no_check:  # again, now that launches are bound (replayed)
                    again = checked(compiled)
                    verdict = verdict if again == "exact" else f"{verdict}; after timing {again}"
            failures += "FAILED" in verdict
            rows.append((name, verdict, times))
            print(f"{name}: {verdict} " + " ".join(f"{k}={v:.3f}ms" for k, v in times.items()), flush=True)
    except KeyboardInterrupt:  # a time limit (timeout -s INT): the rows done so far still print
        print("interrupted: the table holds the workloads finished before", file=sys.stderr)
    print("\n| workload | " + " | ".join(f"{s} ms" for s in systems) + " | " + " | ".join(f"{s}/eager" for s in systems if s != "eager" and "eager" in systems) + " | check |")
    for name, verdict, t in rows:
        ratios = [f"{t[s] / t['eager']:.2f}" for s in systems if s != "eager" and "eager" in systems]
        print(f"| {name} | " + " | ".join(f"{t[s]:.3f}" for s in systems) + " | " + " | ".join(ratios) + f" | {verdict} |")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
