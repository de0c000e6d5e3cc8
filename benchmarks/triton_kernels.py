"""Kernels launched and bytes moved: eager vs conveyor (triton backend) vs TorchInductor.

For an MLP, a LayerNorm/GELU/softmax block and ``nn.TransformerEncoderLayer``,
forward and backward, in one run:

* eager: one kernel per aten op that is not a view (counted with a dispatch
  mode), bytes = inputs read + outputs written per op;
* conveyor: the full pipeline with the triton backend; generated kernels plus
  aten fallbacks (matmuls), bytes the same way (``conveyor_triton.metrics``);
* TorchInductor on CPU: ``torch._inductor.metrics.generated_kernel_count`` and
  ``num_bytes_accessed`` (its ``inductor_metrics`` log on). Its kernel count
  does not include extern calls (matmuls); its bytes do.

Compile time is the first call minus a later call (so the run itself is not
counted), with fresh caches for both compilers. Without a GPU conveyor's
kernels run in Triton's interpreter; kernel counts and bytes do not depend on
that, compile times are for source generation and loading only (no Triton
compilation happens in the interpreter).

    .venv/bin/python benchmarks/triton_kernels.py
"""

from __future__ import annotations

import os
import tempfile

os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton (CPU only here)
_TMP = tempfile.mkdtemp(prefix="conveyor-bench-")
os.environ["CONVEYOR_TRITON_CACHE"] = os.path.join(_TMP, "conveyor")
os.environ["TORCHINDUCTOR_CACHE_DIR"] = os.path.join(_TMP, "inductor")
os.environ["TORCHINDUCTOR_FX_GRAPH_CACHE"] = "0"

import logging  # noqa: E402
import operator  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from typing import Any  # noqa: E402

import conveyor  # noqa: E402
import torch  # noqa: E402
from bench_models import MLP, NormBlock, encoder  # noqa: E402
from conveyor_triton import metrics  # noqa: E402
from torch import nn  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

MODELS: list[tuple[str, Callable[[], nn.Module], tuple[int, ...]]] = [
    ("mlp", MLP, (8, 64, 256)),
    ("layernorm_gelu_softmax", NormBlock, (8, 64, 256)),
    ("transformer_encoder_layer", encoder, (8, 64, 256)),
]


class EagerCounter(TorchDispatchMode):
    """One kernel per aten op that is not a view."""

    def __init__(self) -> None:
        super().__init__()
        self.kernels = 0
        self.bytes = 0

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        schema = func._schema
        view = any(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)
        if not view and func is not operator.getitem and func not in (torch.ops.aten.detach.default,):
            self.kernels += 1
            reads = [a for a in torch.utils._pytree.tree_leaves((args, kwargs)) if isinstance(a, torch.Tensor)]
            writes = [o for o in torch.utils._pytree.tree_leaves(out) if isinstance(o, torch.Tensor)]
            self.bytes += sum(metrics.tensor_bytes(t) for t in reads + writes)
        return out


def eager_counts(model: nn.Module, x: torch.Tensor) -> dict[str, tuple[int, int]]:
    with EagerCounter() as fwd:
        out = model(x)
    with EagerCounter() as bwd:
        out.sum().backward()
    return {"forward": (fwd.kernels, fwd.bytes), "backward": (bwd.kernels, bwd.bytes)}


def _timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    t = time.perf_counter()
    out = fn()
    return out, time.perf_counter() - t


def conveyor_counts(model: nn.Module, x: torch.Tensor) -> dict[str, Any]:
    compiled = conveyor.compile(model, backend="triton")
    with metrics.counting() as fwd:
        out, first_fwd = _timed(lambda: compiled(x))
    _, first_bwd = _timed(lambda: out.sum().backward())
    out2, again_fwd = _timed(lambda: compiled(x))
    with metrics.counting() as bwd:
        _, again_bwd = _timed(lambda: out2.sum().backward())
    return {
        "forward": (fwd.launches, fwd.bytes, fwd.kernels),
        "backward": (bwd.launches, bwd.bytes, bwd.kernels),
        "compile_s": (first_fwd - again_fwd) + (first_bwd - again_bwd),
    }


def inductor_counts(model: nn.Module, x: torch.Tensor) -> dict[str, Any]:
    from torch._inductor import metrics as im

    torch._dynamo.reset()
    torch._logging.set_logs(inductor_metrics=True)
    logging.getLogger("torch._inductor.compile_fx").propagate = False
    compiled = torch.compile(model, backend="inductor")
    im.reset()
    out, first_fwd = _timed(lambda: compiled(x))
    fwd = (im.generated_kernel_count, im.num_bytes_accessed)
    im.reset()
    _, first_bwd = _timed(lambda: out.sum().backward())
    bwd = (im.generated_kernel_count, im.num_bytes_accessed)
    out2, again_fwd = _timed(lambda: compiled(x))
    _, again_bwd = _timed(lambda: out2.sum().backward())
    torch._logging.set_logs()
    return {"forward": fwd, "backward": bwd, "compile_s": (first_fwd - again_fwd) + (first_bwd - again_bwd)}


def main() -> None:
    rows = []
    for name, make, shape in MODELS:
        torch.manual_seed(0)
        model = make()
        x = torch.randn(*shape, requires_grad=True)
        eager = eager_counts(model, x)
        conv = conveyor_counts(model, x)
        try:
            ind = inductor_counts(model, x)
        except Exception as exc:  # a machine without a C++ compiler
            ind = {"forward": ("n/a", "n/a"), "backward": ("n/a", "n/a"), "compile_s": float("nan")}
            print(f"inductor failed on {name}: {type(exc).__name__}: {exc}")
        for part in ("forward", "backward"):
            rows.append((name, part, eager[part], conv[part], ind[part], conv["compile_s"], ind["compile_s"]))
    header = (
        "| model | pass | eager kernels | eager MB | conveyor launches (triton + aten) | conveyor MB "
        "| inductor kernels (+ extern) | inductor MB | conveyor compile s (fwd+bwd) | inductor compile s (fwd+bwd) |"
    )
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    for name, part, e, c, i, cs, is_ in rows:
        imb = f"{i[1] / 1e6:.2f}" if isinstance(i[1], int) else i[1]
        print(
            f"| {name} | {part} | {e[0]} | {e[1] / 1e6:.2f} | {c[0]} ({c[2]} + {c[0] - c[2]}) | {c[1] / 1e6:.2f} "
            f"| {i[0]} | {imb} | {cs:.2f} | {is_:.2f} |"
        )


if __name__ == "__main__":
    main()
