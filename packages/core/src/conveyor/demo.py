"""``conveyor demo``: compile and train a small real model, compare with eager."""

from __future__ import annotations

import copy
import time
from typing import Any

import torch
from torch import nn

import conveyor


class DemoModel(nn.Module):
    """A pre-norm transformer-ish block: LayerNorm, attention, MLP, dropout."""

    def __init__(self, dim: int = 32, heads: int = 4, classes: int = 5) -> None:
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True, dropout=0.0)
        self.norm2 = nn.LayerNorm(dim)
        self.mlp = nn.Sequential(nn.Linear(dim, 4 * dim), nn.GELU(), nn.Dropout(0.1), nn.Linear(4 * dim, dim))
        self.head = nn.Linear(dim, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        x = x + self.mlp(self.norm2(x))
        return self.head(x.mean(dim=1))


def run_demo(steps: int = 5, backend: str | None = None) -> int:
    torch.manual_seed(0)
    model = DemoModel()
    eager_model = copy.deepcopy(model)
    options: dict[str, Any] = {"backend": backend} if backend else {}
    compiled = conveyor.compile(model, **options)
    opt_c = torch.optim.SGD(model.parameters(), lr=0.1)
    opt_e = torch.optim.SGD(eager_model.parameters(), lr=0.1)
    data = torch.randn(8, 6, 32, generator=torch.Generator().manual_seed(1))
    target = torch.randint(0, 5, (8,), generator=torch.Generator().manual_seed(2))
    loss_fn = nn.CrossEntropyLoss()

    print(f"conveyor {conveyor.__version__}: training DemoModel for {steps} steps, compiled vs eager")
    print(f"pipeline: {' -> '.join(s.name for s in compiled.pipeline.stages)}")
    print(f"{'step':>4}  {'eager loss':>12}  {'conveyor loss':>14}  {'|diff|':>9}")
    worst = 0.0
    compile_s = 0.0
    for step in range(steps):
        torch.manual_seed(100 + step)
        loss_e = loss_fn(eager_model(data), target)
        opt_e.zero_grad()
        loss_e.backward()
        opt_e.step()

        torch.manual_seed(100 + step)
        start = time.perf_counter()
        out = compiled(data)
        if step == 0:
            compile_s = time.perf_counter() - start
        loss_c = loss_fn(out, target)
        opt_c.zero_grad()
        loss_c.backward()
        opt_c.step()
        diff = abs(loss_e.item() - loss_c.item())
        worst = max(worst, diff)
        print(f"{step:>4}  {loss_e.item():>12.6f}  {loss_c.item():>14.6f}  {diff:>9.2e}")

    print(f"\nfirst call (capture + compile + run): {compile_s * 1000:.0f} ms")
    print("per-stage report (graph after each stage, and the seconds its stage run took):")
    for g in conveyor.last_graphs(compiled):
        ops = sum(1 for n in g.graph.graph.nodes if n.op == "call_function")
        ins = sum(1 for n in g.graph.graph.nodes if n.op == "placeholder")
        where = f"{g.stage}: {g.step}" if g.step else g.stage
        took = f"{g.seconds * 1000:>7.0f} ms" if g.seconds is not None else f"{'':>10}"
        print(f"  {where:<18} {g.label:<9} {ins:>3} inputs  {ops:>4} ops  {took}")
    ok = worst < 1e-4
    print(f"\n{'OK' if ok else 'MISMATCH'}: largest loss difference {worst:.2e}")
    # sections from plugins (``conveyor_demo`` hook), e.g. a compiled backward
    torch.manual_seed(0)
    extra = compiled.pipeline.plugins.manager.hook.conveyor_demo(
        model=DemoModel(), data=data, target=target, steps=steps, backend=backend
    )
    return 0 if ok and not any(extra) else 1
