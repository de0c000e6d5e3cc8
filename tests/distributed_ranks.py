"""The ranks' side of :mod:`test_distributed`: each rank runs this file as a
script (``python distributed_ranks.py RANK PORT SCENARIO...``), joins a 2-rank
gloo group over 127.0.0.1 with a 60 s timeout on every collective, and runs
the named ``scenario_*`` functions, printing ``PASSED <name>`` after each.

Every scenario trains a model with the compiled program and an eager copy side
by side (different data on each rank, so the all-reduce matters) and compares,
per step, the losses, the gradients after the all-reduce and the parameters,
and at the end checks that the replicas agree: DDP (behind dynamo, with the
triton backend, compiled before wrapping, ``no_sync``, a graph break, buffers,
bucket splitting, compiled autograd, ``conveyor.compile`` of the inner
module), FSDP2 and tensor parallelism.
"""

from __future__ import annotations

import contextlib
import copy
import datetime
import os
import sys
import warnings
from collections.abc import Callable

os.environ.setdefault("TRITON_INTERPRET", "1")  # before triton is first imported

import pytest  # noqa: E402
import torch  # noqa: E402
from conveyor.testing.counting import counting_compiles  # noqa: E402

WORLD = 2
TOL = {"rtol": 1e-4, "atol": 1e-5}


class MLP(torch.nn.Module):
    def __init__(self, d: int = 8, h: int = 16) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(d, h)
        self.fc2 = torch.nn.Linear(h, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.fc1(x)))


class BreakingMLP(MLP):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.fc1(x))
        torch._dynamo.graph_break()
        return self.fc2(h)


class NormMLP(MLP):
    def __init__(self) -> None:
        super().__init__()
        self.bn = torch.nn.BatchNorm1d(16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(torch.relu(self.bn(self.fc1(x))))


class Block(torch.nn.Module):
    """A small pre-norm transformer block (attention + MLP)."""

    def __init__(self, d: int = 16, heads: int = 4) -> None:
        super().__init__()
        self.heads = heads
        self.norm1, self.norm2 = torch.nn.LayerNorm(d), torch.nn.LayerNorm(d)
        self.q, self.k, self.v, self.o = (torch.nn.Linear(d, d) for _ in range(4))
        self.up, self.down = torch.nn.Linear(d, 4 * d), torch.nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        h = self.norm1(x)
        q, k, v = (p(h).view(b, s, -1, 4).transpose(1, 2) for p in (self.q, self.k, self.v))
        a = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.o(a.transpose(1, 2).reshape(b, s, -1))
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm2(x))))


def _close(actual: torch.Tensor, expected: torch.Tensor, what: str) -> None:
    if hasattr(actual, "full_tensor"):
        actual, expected = actual.full_tensor(), expected.full_tensor()
    torch.testing.assert_close(actual, expected, msg=lambda m: f"{what}: {m}", **TOL)


def _replicas_agree(model: torch.nn.Module) -> None:
    import torch.distributed as dist

    # buffers are not compared: DDP broadcasts rank 0's before each forward, which then updates them locally
    for name, t in model.named_parameters():
        local = t.full_tensor() if hasattr(t, "full_tensor") else t.detach()
        gathered = [torch.empty_like(local) for _ in range(WORLD)]
        dist.all_gather(gathered, local.contiguous())
        torch.testing.assert_close(gathered[0], gathered[1], msg=lambda m, n=name: f"replicas differ at {n}: {m}")


def _train_side_by_side(
    compiled: Callable[..., torch.Tensor],
    compiled_model: torch.nn.Module,
    eager: Callable[..., torch.Tensor],
    eager_model: torch.nn.Module,
    make_input: Callable[[int], torch.Tensor],
    steps: int = 3,
    micro: int = 1,
    no_sync: bool = False,
    eager_backward: Callable[[], contextlib.AbstractContextManager[object]] = contextlib.nullcontext,
) -> None:
    """Train both for ``steps`` SGD steps (``micro`` micro-batches each, all
    but the last under ``no_sync()`` when asked) and compare per step."""
    opts = [torch.optim.SGD(m.parameters(), lr=0.05) for m in (compiled_model, eager_model)]
    for step in range(steps):
        for i in range(micro):
            x = make_input(step * micro + i)
            sync = contextlib.nullcontext
            for fn, model in ((compiled, compiled_model), (eager, eager_model)):
                ctx = model.no_sync() if no_sync and i < micro - 1 else sync()
                with ctx:
                    loss = fn(x).pow(2).mean()
                    with contextlib.nullcontext() if fn is compiled else eager_backward():
                        loss.backward()
                if fn is compiled:
                    c_loss = loss.detach()
                else:
                    _close(c_loss, loss.detach(), f"loss at step {step}")
        for (n, p), q in zip(compiled_model.named_parameters(), eager_model.parameters(), strict=True):
            _close(p.grad, q.grad, f"gradient of {n} at step {step}")
        for opt in opts:
            opt.step()
            opt.zero_grad()
        for (n, p), q in zip(compiled_model.named_parameters(), eager_model.parameters(), strict=True):
            _close(p.detach(), q.detach(), f"{n} after step {step}")
    for (n, b), c in zip(compiled_model.named_buffers(), eager_model.named_buffers(), strict=True):
        _close(b, c[1], f"buffer {n}")
    _replicas_agree(compiled_model)


def _input(rank: int, *shape: int) -> Callable[[int], torch.Tensor]:
    def make(i: int) -> torch.Tensor:
        g = torch.Generator().manual_seed(1000 * rank + i)
        return torch.randn(*shape, generator=g)

    return make


def _conveyor(model: torch.nn.Module, **options: object) -> torch.nn.Module:
    return torch.compile(model, backend="conveyor", options=options or None)  # type: ignore[return-value]


def _ddp_pair(cls: type[torch.nn.Module], **ddp: object) -> tuple[torch.nn.Module, torch.nn.Module]:
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = cls()
    return DDP(copy.deepcopy(model), **ddp), DDP(model, **ddp)  # type: ignore[arg-type]


def scenario_ddp_dynamo(rank: int) -> None:
    with counting_compiles() as count:
        compiled_ddp, eager_ddp = _ddp_pair(MLP)
        _train_side_by_side(_conveyor(compiled_ddp), compiled_ddp, eager_ddp, eager_ddp, _input(rank, 4, 8))
    assert count[0] == 1, f"the forward compiled {count[0]} times, not once"


def scenario_ddp_triton(rank: int) -> None:
    compiled_ddp, eager_ddp = _ddp_pair(MLP)
    _train_side_by_side(
        _conveyor(compiled_ddp, backend="triton"), compiled_ddp, eager_ddp, eager_ddp, _input(rank, 4, 8), steps=2
    )


def scenario_ddp_compiled_before_wrap(rank: int) -> None:
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = MLP()
    inner = copy.deepcopy(model)
    compiled_ddp, eager_ddp = DDP(_conveyor(inner)), DDP(model)
    _train_side_by_side(compiled_ddp, compiled_ddp, eager_ddp, eager_ddp, _input(rank, 4, 8))


def scenario_ddp_no_sync(rank: int) -> None:
    compiled_ddp, eager_ddp = _ddp_pair(MLP)
    _train_side_by_side(
        _conveyor(compiled_ddp), compiled_ddp, eager_ddp, eager_ddp, _input(rank, 4, 8), micro=2, no_sync=True
    )


def scenario_ddp_graph_break(rank: int) -> None:
    compiled_ddp, eager_ddp = _ddp_pair(BreakingMLP)
    _train_side_by_side(_conveyor(compiled_ddp), compiled_ddp, eager_ddp, eager_ddp, _input(rank, 4, 8))


def scenario_ddp_buffers(rank: int) -> None:
    compiled_ddp, eager_ddp = _ddp_pair(NormMLP)
    _train_side_by_side(_conveyor(compiled_ddp), compiled_ddp, eager_ddp, eager_ddp, _input(rank, 4, 8))


def scenario_ddp_bucket_sweep(rank: int) -> None:
    """DDPOptimizer splits at bucket boundaries (1 MB buckets: 2 pieces);
    each piece compiles at most as often as the whole model does without DDP
    (once static, once with symbolic sizes), and nothing is compiled again at
    run time for a new batch size."""
    from torch.nn.parallel import DistributedDataParallel as DDP

    def sweep(model: torch.nn.Module) -> list[int]:
        torch._dynamo.reset()
        counts = []
        with counting_compiles() as count:
            compiled = _conveyor(model)
            for batch in range(4, 9):
                x = _input(rank, batch, 64)(batch)
                out, ref = compiled(x), model(x)
                _close(out, ref, f"output at batch size {batch}")
                out.sum().backward()
                counts.append(count[0])
        return counts

    torch.manual_seed(0)
    plain = sweep(MLP(64, 4096))
    torch.manual_seed(0)
    ddp = sweep(DDP(MLP(64, 4096), bucket_cap_mb=1))
    assert plain == [1, 2, 2, 2, 2], plain
    assert ddp == [2, 4, 4, 4, 4], ddp  # was [4, 8, 10, 12, 14]: every piece compiled again at run time


def scenario_ddp_compiled_autograd(rank: int) -> None:
    """The compiled side's backward captured by conveyor's compiled autograd:
    the hooks DDP registers (its reducer's all-reduce) run as in eager."""
    import conveyor_compiled_autograd as cca
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.manual_seed(0)
    model = MLP()
    eager_ddp = DDP(model)
    # torch refuses its C++ reducer under compiled autograd: DDP built here uses its Python reducer's hooks
    with torch._dynamo.config.patch(optimize_ddp="python_reducer"):
        compiled_ddp = DDP(copy.deepcopy(model))
    with torch._dynamo.config.patch(optimize_ddp="python_reducer"), cca.enable() as session:
        _train_side_by_side(
            compiled_ddp,
            compiled_ddp,
            eager_ddp,
            eager_ddp,
            _input(rank, 4, 8),
            eager_backward=torch._dynamo.compiled_autograd._disable,
        )
    assert session.captures >= 1


def scenario_ddp_standalone(rank: int) -> None:
    import conveyor

    compiled_ddp, eager_ddp = _ddp_pair(MLP)
    with pytest.raises(
        conveyor.CaptureError, match=r"DistributedDataParallel .* torch.compile\(model, backend='conveyor'\)"
    ):
        conveyor.compile(compiled_ddp)
    # what the error suggests: DDP's own forward runs eagerly around the compiled module
    compiled_ddp.module.forward = conveyor.compile(compiled_ddp.module.forward)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no eager fallback
        _train_side_by_side(compiled_ddp, compiled_ddp, eager_ddp, eager_ddp, _input(rank, 4, 8))


def _fsdp2(model: torch.nn.Module) -> torch.nn.Module:
    from torch.distributed.fsdp import fully_shard

    for block in (model.fc1, model.fc2):
        fully_shard(block)
    return fully_shard(model)  # type: ignore[no-any-return]


def scenario_fsdp2_dynamo(rank: int) -> None:
    import conveyor

    torch.manual_seed(0)
    model = MLP()
    compiled_model, eager_model = _fsdp2(copy.deepcopy(model)), _fsdp2(model)
    with pytest.raises(conveyor.CaptureError, match=r"fully_shard \(FSDP2\)"):
        conveyor.compile(compiled_model)
    with counting_compiles() as count:
        _train_side_by_side(_conveyor(compiled_model), compiled_model, eager_model, eager_model, _input(rank, 4, 8))
    assert count[0] >= 1, "nothing was compiled"


def _tp(model: torch.nn.Module, plan: dict[str, str]) -> torch.nn.Module:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor.parallel import ColwiseParallel, RowwiseParallel, parallelize_module

    mesh = init_device_mesh("cpu", (WORLD,))
    styles = {"col": ColwiseParallel, "row": RowwiseParallel}
    return parallelize_module(model, mesh, {name: styles[s]() for name, s in plan.items()})


def _tensor_parallel(
    rank: int, cls: Callable[[], torch.nn.Module], plan: dict[str, str], shape: tuple[int, ...]
) -> None:
    """Inference and training compile (DTensor parameters traced as their
    local shards, the backward traced with DTensor's own autograd: Note
    [Subclass programs in training]) and match eager."""
    import conveyor

    torch.manual_seed(0)
    model = cls()
    make = _input(0, *shape)  # tensor parallelism: the same input on every rank
    for entry in ("torch.compile", "conveyor.compile"):
        torch._dynamo.reset()
        compiled_model, eager_model = _tp(copy.deepcopy(model), plan), _tp(copy.deepcopy(model), plan)
        compiled = _conveyor(compiled_model) if entry == "torch.compile" else conveyor.compile(compiled_model)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("error", UserWarning)  # compiled, not an eager fallback
            _close(compiled(make(99)), eager_model(make(99)), f"{entry}: inference output")
        with warnings.catch_warnings(record=True) as caught, counting_compiles() as count:
            warnings.simplefilter("always")
            _train_side_by_side(compiled, compiled_model, eager_model, eager_model, make)
        fallbacks = [str(w.message) for w in caught if "conveyor" in str(w.message)]
        assert not fallbacks, fallbacks
        assert count[0] >= 1


def scenario_tp_mlp(rank: int) -> None:
    _tensor_parallel(rank, MLP, {"fc1": "col", "fc2": "row"}, (4, 8))


def scenario_tp_block(rank: int) -> None:
    plan = {"q": "col", "k": "col", "v": "col", "o": "row", "up": "col", "down": "row"}
    _tensor_parallel(rank, Block, plan, (2, 6, 16))


def _main(rank: int, port: int, scenarios: list[str]) -> None:
    import torch.distributed as dist

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(WORLD))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD, timeout=datetime.timedelta(seconds=60))
    try:
        for name in scenarios:
            torch._dynamo.reset()
            globals()[f"scenario_{name}"](rank)
            print(f"PASSED {name}", flush=True)
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    _main(int(sys.argv[1]), int(sys.argv[2]), sys.argv[3:])
    # every scenario passed and the group is destroyed: leave without the interpreter's
    # teardown, where torch's gloo threads sometimes abort the process ("terminate called
    # without an active exception", seen under load after every scenario had passed)
    sys.stdout.flush()
    os._exit(0)
