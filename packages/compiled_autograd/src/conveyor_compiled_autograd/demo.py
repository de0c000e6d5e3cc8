"""The compiled-autograd section of ``conveyor demo`` (core's ``conveyor_demo`` hook)."""

from __future__ import annotations

import copy
from typing import Any

import conveyor
import torch
from torch import nn
from torch._dynamo import compiled_autograd as ca

from conveyor_compiled_autograd.session import enable


def run(model: nn.Module, data: torch.Tensor, target: torch.Tensor, steps: int, backend: str | None) -> int:
    """Train ``model`` eagerly and compiled (conveyor forward, compiled
    autograd backward) side by side; print the losses, captures and inlined
    graphs. 0 when the losses match."""
    eager_model = copy.deepcopy(model)
    options: dict[str, Any] = {"backend": backend} if backend else {}
    compiled = conveyor.compile(model, **options)
    opt_c = torch.optim.SGD(model.parameters(), lr=0.1)
    opt_e = torch.optim.SGD(eager_model.parameters(), lr=0.1)
    loss_fn = nn.CrossEntropyLoss()
    print("\ncompiled autograd: the whole backward captured into one graph, conveyor's backward inlined")
    print(f"{'step':>4}  {'eager loss':>12}  {'conveyor loss':>14}  {'|diff|':>9}  {'captures':>8}")
    worst = 0.0
    with enable(**options) as session:
        for step in range(steps):
            torch.manual_seed(200 + step)
            with ca._disable():  # the reference: torch's engine, node by node
                loss_e = loss_fn(eager_model(data), target)
                opt_e.zero_grad()
                loss_e.backward()
            opt_e.step()
            torch.manual_seed(200 + step)
            loss_c = loss_fn(compiled(data), target)
            opt_c.zero_grad()
            loss_c.backward()
            opt_c.step()
            diff = abs(loss_e.item() - loss_c.item())
            worst = max(worst, diff)
            print(f"{step:>4}  {loss_e.item():>12.6f}  {loss_c.item():>14.6f}  {diff:>9.2e}  {session.captures:>8}")
    last = session.last
    if last is not None:
        captured = last.graphs[0].graph
        calls = sum(1 for n in captured.graph.nodes if n.op == "call_function")
        print(
            f"last capture: {calls} calls, {last.inlined} conveyor backward graph(s) inlined, "
            f"opaque: {', '.join(last.opaque) or 'nothing'}; compiled by: "
            + " -> ".join(dict.fromkeys(g.stage for g in last.graphs[1:]))
        )
    ok = worst < 1e-4
    print(f"{'OK' if ok else 'MISMATCH'}: largest loss difference {worst:.2e}")
    return 0 if ok else 1
