"""Bytes written back to the caller's memory when a small alias of a large
base is mutated: conveyor (synthetic_base, tight bases) against PyTorch
(``torch.compile(backend="aot_eager")``, whose synthetic base is the whole
common base).

Counts, with the profiler, the bytes written by every ``aten::copy_`` called
from Python during one compiled call (after a warm-up call that compiles):
the epilogue's write-back in both (copies inside other ops, such as the one
inside ``clone``, are not counted). A dispatch mode would not do: dynamo
runs code differently while one is active.

Run: ``.venv/bin/python benchmarks/synthetic_base_bytes.py``
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import conveyor
import torch
from conveyor import Plugins
from torch.profiler import ProfilerActivity, profile

STAGES = ("dedupe", "synthetic_base", "functionalize", "autograd")


def copied_bytes(prof: Any, itemsize: int) -> int:
    """Bytes written by top-level ``aten::copy_`` calls (every case here is
    one dtype, of ``itemsize`` bytes)."""
    total = 0
    for evt in prof.events():
        parent = evt.cpu_parent
        if evt.name == "aten::copy_" and (parent is None or not parent.name.startswith("aten::")):
            numel = 1
            for n in evt.input_shapes[0]:
                numel *= n
            total += numel * itemsize
    return total


def one_mutated(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a.add_(1)
    return b * 2


def both_mutated(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    a.add_(1)
    b.mul_(2)
    return a.sum() + b.sum()


CASES: dict[str, tuple[Callable[..., Any], Callable[[torch.Tensor], tuple[torch.Tensor, ...]], tuple[int, ...]]] = {
    "1-D base of 2^20 floats, a = x[100:110], b = x[105:120], a mutated": (
        one_mutated,
        lambda x: (x[100:110], x[105:120]),
        (1 << 20,),
    ),
    "same, both mutated": (both_mutated, lambda x: (x[100:110], x[105:120]), (1 << 20,)),
    "1024x1024 base, a = x[500], b = x[500, 10:20], both mutated": (
        both_mutated,
        lambda x: (x[500], x[500, 10:20]),
        (1024, 1024),
    ),
    "1024x1024 base, a = x[:, 10:20], b = x[:, 15:30], both mutated": (
        both_mutated,
        lambda x: (x[:, 10:20], x[:, 15:30]),
        (1024, 1024),
    ),
}


def measure(compile: Callable[[Any], Any], fn: Any, make: Any, shape: tuple[int, ...], grad: bool) -> str:
    compiled = compile(fn)
    try:
        for _ in range(2):  # the first call compiles
            root = torch.randn(shape, requires_grad=grad)
            base = root * 1 if grad else root
            args = make(base)
            with profile(activities=[ProfilerActivity.CPU], record_shapes=True) as prof:
                out = compiled(*args)
        if grad:
            out.sum().backward()
        return f"{copied_bytes(prof, root.element_size()):>10,d}"
    except Exception as exc:  # report what fails, as PyTorch does on both-mutated + grad
        cause: BaseException = exc
        while (inner := getattr(cause, "inner_exception", None) or cause.__cause__) is not None:
            cause = inner
        return f"fails: {type(cause).__name__}: {str(cause).strip().splitlines()[0][:70]}"


def main() -> None:
    plugins = Plugins()
    plugins.load_entry_points(allow=STAGES)

    def ours(f: Any) -> Any:
        return conveyor.compile(f, plugins=plugins, backend="eager")

    def whole_base(f: Any) -> Any:
        return conveyor.compile(f, plugins=plugins, backend="eager", stages={"synthetic_base": {"tight": False}})

    def pytorch(f: Any) -> Any:
        torch._dynamo.reset()
        return torch.compile(f, backend="aot_eager", dynamic=False)

    print("bytes written back by copy_ per call\n")
    for name, (fn, make, shape) in CASES.items():
        for grad in (False, True):
            print(f"{name}{', requires_grad' if grad else ''}")
            for label, compile in (
                ("conveyor", ours),
                ("conveyor tight=False", whole_base),
                ("pytorch aot_eager", pytorch),
            ):
                print(f"  {label:<22}{measure(compile, fn, make, shape, grad)}")


if __name__ == "__main__":
    main()
