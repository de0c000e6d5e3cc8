"""Per-call overhead of the functionalize stage's run-time wrappers, side by side
with torch's own AOTAutograd wrappers, on small programs where overhead dominates.

Each program takes several inputs, mutates two of them and returns one output
that aliases an input. For each, one run times:

* ``eager``: the plain function;
* ``aot_function``: ``torch._functorch.aot_autograd.aot_function`` with a no-op
  compiler (AOTAutograd's runtime wrappers around the eager-run graph);
* ``torch.compile aot_eager``: the same behind dynamo's guards;
* ``conveyor.compile``: conveyor's whole per-call path (flatten, cache key,
  wrappers, eager backend);
* ``conveyor wrappers``: only the compiled callable conveyor's stages built
  (``Compiled.last.compiled(flat)``), the part comparable to AOTAutograd's
  runtime wrappers;
* ``conveyor bare graph``: the inner functional graph alone, without the
  functionalize epilogue (what the wrappers add is the difference);
* ``aot graph``: AOTAutograd's own forward graph alone (what its runtime
  wrappers add is ``aot_function`` minus this).

The ratio printed compares what each side's run-time wrappers add on top of
its own graph.

Run: ``.venv/bin/python benchmarks/functionalize_overhead.py`` (CPU, a few seconds).
"""

from __future__ import annotations

import timeit
from collections.abc import Callable
from typing import Any

import conveyor
import conveyor_functionalize.plugin
import torch
from torch._functorch.aot_autograd import aot_function


def two_mutations_view_out(a, b, c, d):
    a.add_(1)
    b.mul_(0.5)
    return a.view(-1), c * d


def two_mutations_view_out_sum(a, b, c, d, e):
    a[0].add_(1)
    b.mul_(0.5)
    return c.t(), (d + e).sum()


PROGRAMS: dict[str, tuple[Callable[..., Any], Callable[[bool], list[torch.Tensor]]]] = {
    "add_/mul_, out a.view(-1)": (two_mutations_view_out, lambda rg: [torch.randn(8), torch.randn(8), torch.randn(8, requires_grad=rg), torch.randn(8)]),
    "a[0].add_/mul_, out c.t()": (two_mutations_view_out_sum, lambda rg: [torch.randn(4, 4), torch.randn(4), torch.randn(4, 4), torch.randn(4, requires_grad=rg), torch.randn(4)]),
}


def functionalize_only() -> conveyor.Plugins:
    """The core and the functionalize stage: the wrappers measured are its own."""
    plugins = conveyor.Plugins()
    plugins.register(conveyor_functionalize.plugin, name="functionalize")
    return plugins


def per_call_us(fns: dict[str, Callable[[], Any]], number: int, rounds: int = 9) -> dict[str, float]:
    """Best per-call time of each callable, measured round-robin so that a
    change in machine load hits every method alike."""
    best = dict.fromkeys(fns, float("inf"))
    for fn in fns.values():
        fn()
    for _ in range(rounds):
        for name, fn in fns.items():
            best[name] = min(best[name], timeit.timeit(fn, number=number) / number * 1e6)
    return best


def bare_graph(compiled: conveyor.Compiled) -> Callable[[list[Any]], Any]:
    graph = next(g.graph for g in compiled.last.graphs if g.stage == "functionalize")
    return lambda flat: graph(*flat)


def measure(fn: Callable[..., Any], inputs: list[torch.Tensor], number: int) -> dict[str, float]:
    """Per-call times of one program on one set of inputs, every method."""
    aot_graphs: list[torch.fx.GraphModule] = []
    aot = aot_function(fn, fw_compiler=lambda gm, _: aot_graphs.append(gm) or gm)
    dyn = torch.compile(fn, backend="aot_eager")
    conv = conveyor.compile(fn, plugins=functionalize_only(), backend="eager")
    conv(*inputs)
    aot(*inputs)
    flat = list(inputs)
    wrappers = conv.last.compiled
    graph = bare_graph(conv)
    aot_graph = aot_graphs[0]
    return per_call_us(
        {
            "eager": lambda: fn(*inputs),
            "aot_fn": lambda: aot(*inputs),
            "aot_eager": lambda: dyn(*inputs),
            "conveyor": lambda: conv(*inputs),
            "wrappers": lambda: wrappers(list(flat)),
            "graph": lambda: graph(list(flat)),
            "aot_graph": lambda: aot_graph(*flat),
        },
        number,
    )


def main(number: int = 1000) -> None:
    print(f"torch {torch.__version__}; per-call time in microseconds (best of 9 rounds x {number} calls)")
    header = f"{'program':28} {'grad':5} {'eager':>8} {'aot_fn':>8} {'aot_eager':>10} {'conveyor':>9} {'wrappers':>9} {'graph':>8} {'aot_graph':>9} | {'ovh conv/aot':>12}"
    print(header)
    print("-" * len(header))
    for name, (fn, make) in PROGRAMS.items():
        for rg in (False, True):
            t = measure(fn, make(rg), number)
            ratio = (t["wrappers"] - t["graph"]) / max(t["aot_fn"] - t["aot_graph"], 1e-9)
            print(
                f"{name:28} {str(rg):5} {t['eager']:8.1f} {t['aot_fn']:8.1f} {t['aot_eager']:10.1f} "
                f"{t['conveyor']:9.1f} {t['wrappers']:9.1f} {t['graph']:8.1f} {t['aot_graph']:9.1f} | {ratio:12.2f}"
            )
    print(
        "ovh conv/aot = (conveyor wrappers - conveyor graph) / (aot_function - aot graph): what the "
        "functionalize epilogue adds per call, over what AOTAutograd's runtime wrappers add"
    )


if __name__ == "__main__":
    main()
