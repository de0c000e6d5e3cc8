"""Compiled autograd: one captured backward vs the engine's node-by-node backward.

A small transformer training step (two ``nn.TransformerEncoderLayer`` blocks,
each its own conveyor region, a linear head and a cross-entropy loss in
eager between and after them). In one run:

* backward time (forward untimed) as the thread's CPU time (another
  process on a loaded machine does not count), interleaved rounds, medians
  and minima, with ``OMP_NUM_THREADS=1``:
  - eager: eager forward, torch's engine runs the backward node by node;
  - conveyor per region: ``conveyor.compile``d blocks, each region's compiled
    backward run by torch's engine, the rest eager;
  - conveyor compiled autograd: the same model, the backward captured into one
    graph (conveyor's backward graphs inlined) and compiled by conveyor
    (``conveyor_compiled_autograd.enable()``, eager backend);
  - torch compiled autograd + aot_eager: eager forward, the backward captured
    by torch and compiled with ``torch.compile(backend="aot_eager")``
    (``torch._dynamo.compiled_autograd._enable``);
* with the triton backend (smaller sizes: Triton's interpreter on CPU),
  kernels launched (generated kernels + aten fallbacks inside conveyor
  programs) and bytes moved (``conveyor_triton.metrics``), for the whole
  captured backward vs the per-region backwards. What runs outside conveyor
  programs is eager aten in both and is counted separately with a dispatch
  mode (per region: the loss, the head and the ops between the blocks, and
  gradient accumulation; captured: gradient accumulation only).

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/compiled_autograd.py [--rounds N] [--timing-only]
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton (CPU only here)
os.environ.setdefault("OMP_NUM_THREADS", "1")

import contextlib  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402
import warnings  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import conveyor  # noqa: E402
import conveyor_compiled_autograd as cca  # noqa: E402
import torch  # noqa: E402
from torch import nn  # noqa: E402
from torch._dynamo import compiled_autograd as ca  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes  # noqa: E402

torch.set_num_threads(1)


class Model(nn.Module):
    """Two encoder blocks (each may be compiled on its own), a head, a loss."""

    def __init__(self, d: int, heads: int, classes: int = 10) -> None:
        super().__init__()
        self.inp = nn.Linear(d, d)
        self.blocks = nn.ModuleList(
            nn.TransformerEncoderLayer(d, heads, dim_feedforward=4 * d, dropout=0.0, batch_first=True) for _ in range(2)
        )
        self.head = nn.Linear(d, classes)
        self.run_blocks: list[Callable[[torch.Tensor], torch.Tensor]] = list(self.blocks)

    def forward(self, x: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.inp(x))
        for block in self.run_blocks:
            h = block(h) * 0.5 + h * 0.5  # eager ops between the regions
        return nn.functional.cross_entropy(self.head(h.mean(1)), target)


def compiled_blocks(model: Model, **options: Any) -> Model:
    """The same model with each block compiled by conveyor."""
    model.run_blocks = [conveyor.compile(block, **options) for block in model.blocks]
    return model


def make(d: int, heads: int) -> Model:
    torch.manual_seed(0)
    return Model(d, heads)


def time_backward(model: Model, x: torch.Tensor, target: torch.Tensor, ctx: Callable[[], Any]) -> float:
    loss = model(x, target)
    with ctx():
        start = time.thread_time()
        loss.backward()
        elapsed = time.thread_time() - start
    for p in model.parameters():
        p.grad = None
    return elapsed


def timing(d: int = 64, heads: int = 4, batch: int = 8, seq: int = 32, rounds: int = 20, warmup: int = 3) -> None:
    x = torch.randn(batch, seq, d)
    target = torch.randint(0, 10, (batch,))
    aot = torch.compile(backend="aot_eager")
    models = {
        "eager": make(d, heads),
        "conveyor per region": compiled_blocks(make(d, heads)),
        "conveyor compiled autograd": compiled_blocks(make(d, heads)),
        "torch compiled autograd + aot_eager": make(d, heads),
    }

    @contextlib.contextmanager
    def torch_ca() -> Any:
        with ca._disable(), ca._enable(aot):
            yield

    contexts: dict[str, Callable[[], Any]] = {
        "eager": ca._disable,
        "conveyor per region": ca._disable,
        "conveyor compiled autograd": contextlib.nullcontext,  # inside the session below
        "torch compiled autograd + aot_eager": torch_ca,
    }
    times: dict[str, list[float]] = {k: [] for k in models}
    # one session around the whole loop, as in a training loop: enable() starts with an empty capture cache
    with cca.enable() as session:
        for r in range(warmup + rounds):
            for name, model in models.items():
                dt = time_backward(model, x, target, contexts[name])
                if r >= warmup:
                    times[name].append(dt)
        # gradients against eager's, one more step each
        grads = {}
        for name, model in models.items():
            with contexts[name]():
                model(x, target).backward()
            grads[name] = [p.grad for p in model.parameters()]
    worst = {
        name: max((a - b).abs().max().item() for a, b in zip(grads["eager"], g, strict=True)) for name, g in grads.items()
    }
    base = statistics.median(times["eager"])
    fastest = min(times["eager"])
    print(
        f"backward time (thread CPU time): d={d} heads={heads} batch={batch} seq={seq}, {rounds} interleaved rounds, "
        f"median and minimum (the minimum is steadier on a loaded machine), OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}"
    )
    print("| variant | backward ms (median) | vs eager | backward ms (min) | vs eager | max abs grad diff vs eager |")
    print("|---|---|---|---|---|---|")
    for name, ts in times.items():
        med, low = statistics.median(ts), min(ts)
        print(
            f"| {name} | {med * 1e3:.2f} | {med / base:.2f}x | {low * 1e3:.2f} | {low / fastest:.2f}x | {worst[name]:.1e} |"
        )
    last = session.last
    print(
        f"conveyor compiled autograd: {session.captures} capture(s); last: {last.inlined if last else 0} conveyor "
        f"backward graphs inlined, opaque {last.opaque if last else ()}, "
        f"conveyor compiles per capture {[c.compiles for c in session.history]}"
    )


class AtenCounter(TorchDispatchMode):
    """Eager aten calls outside conveyor programs (kernels launched, bytes moved).

    Conveyor's triton programs count themselves (``conveyor_triton.metrics``);
    while one runs (``inside``), this mode does not count."""

    def __init__(self) -> None:
        super().__init__()
        self.kernels = 0
        self.bytes = 0
        self.inside = 0
        self.size_boxes = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        from conveyor_triton import metrics

        out = func(*args, **(kwargs or {}))
        if self.inside:
            return out
        schema = func._schema
        view = any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)
        if func is torch.ops.aten.empty.memory_format and isinstance(out, torch.Tensor) and out.numel() == 0:
            self.size_boxes += 1  # torch's compiled-autograd run time passes each size as empty(0, n): no data
        elif not view and func is not torch.ops.aten.detach.default:
            self.kernels += 1
            leaves = torch.utils._pytree.tree_leaves((args, kwargs, out))
            self.bytes += sum(
                metrics.tensor_bytes(t) for t in leaves if isinstance(t, torch.Tensor) and t.layout is torch.strided
            )
        return out


def _marking_programs(counter: AtenCounter) -> Callable[[], None]:
    """Mark conveyor triton programs' runs for ``counter`` (this benchmark
    only: wraps ``Program.__call__``); returns the undo."""
    from conveyor_triton.program import Program

    original = Program.__call__

    def call(self: Any, args: list[Any]) -> list[Any]:
        counter.inside += 1
        try:
            with _disable_current_modes():  # the program runs as it would without the counter
                return original(self, args)
        finally:
            counter.inside -= 1

    Program.__call__ = call  # type: ignore[method-assign]

    def undo() -> None:
        Program.__call__ = original  # type: ignore[method-assign]

    return undo


def triton_counts(d: int = 32, heads: int = 2, batch: int = 2, seq: int = 8) -> None:
    from conveyor_triton import metrics

    x = torch.randn(batch, seq, d)
    target = torch.randint(0, 10, (batch,))
    rows = []
    for name in ("conveyor per region (triton)", "conveyor compiled autograd (triton)"):
        captured = name.startswith("conveyor compiled")
        model = compiled_blocks(make(d, heads), backend="triton")
        ref = make(d, heads)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # no captured segment may fall back to eager
            with cca.enable(backend="triton") if captured else ca._disable() as session:
                for _step in range(2):  # the second step is counted (everything compiled by then)
                    for p in (*model.parameters(), *ref.parameters()):
                        p.grad = None
                    loss = model(x, target)
                    with ca._disable():
                        ref(x, target).backward()
                    counter = AtenCounter()
                    undo = _marking_programs(counter)
                    try:
                        with metrics.counting() as counted, counter:
                            loss.backward()
                    finally:
                        undo()
        worst = max((a.grad - b.grad).abs().max().item() for a, b in zip(ref.parameters(), model.parameters(), strict=True))
        inlined = session.last.inlined if captured and session.last else "-"
        rows.append(
            (name, counted.launches, counted.kernels, counted.bytes, counter.kernels, counter.bytes, worst, inlined, counter.size_boxes)
        )
    print(f"\ntriton backend, backward only: d={d} heads={heads} batch={batch} seq={seq} (Triton interpreter on CPU)")
    print(
        "| backward | conveyor launches (triton + aten) | conveyor MB | eager aten calls outside conveyor | their MB "
        "| total launches | total MB | inlined | size boxes (empty(0, n), no data) | max abs grad diff |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for name, launches, kernels, nbytes, out_k, out_b, worst, inlined, boxes in rows:
        print(
            f"| {name} | {launches} ({kernels} + {launches - kernels}) | {nbytes / 1e6:.3f} | {out_k} | {out_b / 1e6:.3f} "
            f"| {launches + out_k} | {(nbytes + out_b) / 1e6:.3f} | {inlined} | {boxes} | {worst:.1e} |"
        )


def main() -> None:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="timed rounds of every variant (default 20)")
    parser.add_argument("--timing-only", action="store_true", help="skip the triton backend's counts")
    args = parser.parse_args()
    timing(rounds=args.rounds)
    if not args.timing_only:
        triton_counts()


if __name__ == "__main__":
    main()
