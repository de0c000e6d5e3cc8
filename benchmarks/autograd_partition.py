"""Bytes saved for backward and compile time, for one ``nn.TransformerEncoderLayer``.

Saved bytes, one training call each (after a warm-up call that compiles),
measured with ``conveyor_autograd.measure.saved_for_backward`` (every tensor
packed for backward passes through ``saved_tensors_hooks``; storages counted
once):

* ``eager``: PyTorch without compiling;
* ``conveyor save_eager`` / ``conveyor min_cut``: ``conveyor.compile`` with
  each of the autograd stage's partitioners (eager backend);
* ``torch.compile aot_eager``: AOTAutograd's own min-cut partitioner
  (``torch._functorch.partitioners.min_cut_rematerialization_partition``).

"all" counts every storage kept for backward; "activations" leaves out the
storages of the parameters and the input, which the caller keeps alive anyway.

Both for the layer's default ReLU feed-forward and with ``activation="gelu"``
(GELU's output is cheap to recompute from its input, which the backward needs
anyway).

Compile time (ReLU layer): the first call of a fresh copy of the layer (capture, every
stage, partitioning, and the call itself), for ``conveyor.compile``, for
``torch.compile(backend="conveyor")`` (dynamo in front of the same pipeline),
and for ``torch.compile(backend="aot_eager")``; median of a few runs.

Run: ``.venv/bin/python benchmarks/autograd_partition.py`` (CPU, about a minute).
"""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Callable
from typing import Any

import conveyor
import torch
import torch._dynamo
from conveyor_autograd.measure import SavedForBackward, saved_for_backward

D_MODEL, HEADS, FF, BATCH, SEQ = 256, 4, 1024, 8, 64
COMPILE_RUNS = 3
ACTIVATIONS = ("relu", "gelu")  # the layer's default, and one whose output min_cut recomputes


def make_layer(activation: str = "relu") -> torch.nn.Module:
    torch.manual_seed(0)
    return torch.nn.TransformerEncoderLayer(
        D_MODEL, HEADS, FF, dropout=0.0, batch_first=True, activation=activation
    ).train()


def conveyor_with(partitioner: str) -> Callable[[torch.nn.Module], Any]:
    return lambda m: conveyor.compile(m, backend="eager", stages={"autograd": {"partitioner": partitioner}})


def dynamo_with(backend: str) -> Callable[[torch.nn.Module], Any]:
    def compile(m: torch.nn.Module) -> Any:
        torch._dynamo.reset()
        return torch.compile(m, backend=backend)

    return compile


VARIANTS: dict[str, Callable[[torch.nn.Module], Any]] = {
    "eager": lambda m: m,
    "conveyor save_eager": conveyor_with("save_eager"),
    "conveyor min_cut": conveyor_with("min_cut"),
    "torch.compile aot_eager": dynamo_with("aot_eager"),
}
COMPILERS: dict[str, Callable[[torch.nn.Module], Any]] = {
    "conveyor.compile (min_cut)": conveyor_with("min_cut"),
    "torch.compile conveyor (min_cut)": dynamo_with("conveyor"),
    "torch.compile aot_eager": dynamo_with("aot_eager"),
}


def saved_bytes(
    compile: Callable[[torch.nn.Module], Any], x: torch.Tensor, activation: str
) -> tuple[SavedForBackward, torch.Tensor]:
    layer = make_layer(activation)
    run = compile(layer)
    run(x).sum().backward()  # compile outside the measurement
    keep = [*layer.parameters(), x]
    out, saved = saved_for_backward(lambda: run(x), exclude=keep)
    out.sum().backward()
    return saved, out.detach()


def compile_seconds(compile: Callable[[torch.nn.Module], Any], x: torch.Tensor) -> float:
    times = []
    for _ in range(COMPILE_RUNS):
        run = compile(copy.deepcopy(make_layer()))
        start = time.perf_counter()
        run(x)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    torch.set_num_threads(2)
    x = torch.randn(BATCH, SEQ, D_MODEL, requires_grad=True)
    print(f"nn.TransformerEncoderLayer(d_model={D_MODEL}, nhead={HEADS}, dim_feedforward={FF}), input {tuple(x.shape)}, float32, CPU")
    for activation in ACTIVATIONS:
        print()
        print(f"{'saved for backward (' + activation + ')':<28}{'tensors':>9}{'all MiB':>10}{'activations MiB':>17}{'vs aot_eager':>14}")
        results = {name: saved_bytes(compile, x, activation) for name, compile in VARIANTS.items()}
        reference = results["eager"][1]
        aot = results["torch.compile aot_eager"][0].bytes_besides
        for name, (saved, out) in results.items():
            torch.testing.assert_close(out, reference, atol=1e-4, rtol=1e-4)
            print(
                f"{name:<28}{saved.tensors:>9}{saved.bytes / 2**20:>10.2f}{saved.bytes_besides / 2**20:>17.2f}"
                f"{saved.bytes_besides / aot:>13.2f}x"
            )
    print()
    print(f"{'first call (compile + run)':<36}{'seconds':>9}{'vs aot_eager':>14}")
    seconds = {name: compile_seconds(compile, x) for name, compile in COMPILERS.items()}
    for name, s in seconds.items():
        print(f"{name:<36}{s:>9.2f}{s / seconds['torch.compile aot_eager']:>13.2f}x")


if __name__ == "__main__":
    main()
