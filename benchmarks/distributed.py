"""Distributed training steps on 2 gloo ranks (127.0.0.1): eager against
``torch.compile(backend="aot_eager")`` (PyTorch's own AOTAutograd), the
conveyor dynamo backend and ``conveyor.compile``, per entry point where it
applies; plus conveyor's compile counts for the DDP batch-size sweep.

Programs: a DDP MLP (64 -> 4096 -> 64, 1 MB buckets: DDPOptimizer splits it
in two) and a tensor-parallel MLP (column-wise then row-wise, DTensor
parameters). Time is the median of ``--steps`` training steps (forward,
backward, SGD) after 3 warm-up steps, rank 0's clock.

Run: ``OMP_NUM_THREADS=1 .venv/bin/python benchmarks/distributed.py``.
"""

from __future__ import annotations

import argparse
import copy
import datetime
import os
import socket
import statistics
import time
from collections.abc import Callable

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


class MLP(torch.nn.Module):
    def __init__(self, d: int, h: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = torch.nn.Linear(d, h), torch.nn.Linear(h, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


def _time(fn: Callable[[torch.Tensor], torch.Tensor], model: torch.nn.Module, x: torch.Tensor, steps: int) -> float:
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    times = []
    for i in range(steps + 3):
        dist.barrier()
        start = time.perf_counter()
        fn(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()
        if i >= 3:
            times.append(time.perf_counter() - start)
    return statistics.median(times)


def _rank(rank: int, port: int, steps: int) -> None:
    import conveyor
    from conveyor.testing.counting import counting_compiles
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module
    from torch.nn.parallel import DistributedDataParallel as DDP

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=2, timeout=datetime.timedelta(seconds=60))
    torch.manual_seed(0)
    results: list[tuple[str, str, float]] = []

    base = MLP(64, 4096)
    x = torch.randn(8, 64)
    for name in ("eager", "aot_eager", "conveyor"):
        torch._dynamo.reset()
        ddp = DDP(copy.deepcopy(base), bucket_cap_mb=1)
        fn = ddp if name == "eager" else torch.compile(ddp, backend=name)
        results.append(("DDP MLP", f"torch.compile {name}" if name != "eager" else "eager", _time(fn, ddp, x, steps)))
    ddp = DDP(copy.deepcopy(base), bucket_cap_mb=1)
    ddp.module.forward = conveyor.compile(ddp.module.forward)
    results.append(("DDP MLP", "conveyor.compile (inner forward)", _time(ddp, ddp, x, steps)))

    mesh = init_device_mesh("cpu", (2,))
    small = MLP(256, 1024)
    x = torch.randn(16, 256)
    for name in ("eager", "aot_eager", "conveyor", "conveyor.compile"):
        torch._dynamo.reset()
        tp = parallelize_module(copy.deepcopy(small), mesh, {"fc1": ColwiseParallel(), "fc2": RowwiseParallel()})
        if name == "eager":
            fn: Callable[[torch.Tensor], torch.Tensor] = tp
        elif name == "conveyor.compile":
            fn = conveyor.compile(tp)
        else:
            fn = torch.compile(tp, backend=name)
        label = name if name in ("eager", "conveyor.compile") else f"torch.compile {name}"
        results.append(("tensor-parallel MLP", label, _time(fn, tp, x, steps)))

    torch._dynamo.reset()
    ddp = DDP(copy.deepcopy(base), bucket_cap_mb=1)
    compiled = torch.compile(ddp, backend="conveyor")
    sweep = []
    with counting_compiles() as counts:
        for batch in range(4, 9):
            compiled(torch.randn(batch, 64)).sum().backward()
            sweep.append(counts[0])

    if rank == 0:
        eager = {prog: t for prog, label, t in results if label == "eager"}
        print(f"{'program':22} {'entry point':36} {'ms/step':>8} {'x eager':>8}")
        for prog, label, t in results:
            print(f"{prog:22} {label:36} {t * 1e3:8.2f} {t / eager[prog]:8.2f}")
        print(f"DDP batch sizes 4..8, cumulative conveyor compiles: {sweep}")
    dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=20)
    args = parser.parse_args()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(_rank, args=(port, args.steps), nprocs=2, join=True)


if __name__ == "__main__":
    main()
