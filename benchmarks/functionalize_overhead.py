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


def per_call_us(fn: Callable[[], Any], number: int) -> float:
    fn()
    fn()
    best = min(timeit.repeat(fn, number=number, repeat=5))
    return best / number * 1e6


def bare_graph(compiled: conveyor.Compiled) -> Callable[[list[Any]], Any]:
    graph = next(g.graph for g in compiled.last.graphs if g.stage == "functionalize")
    return lambda flat: graph(*flat)


def main(number: int = 2000) -> None:
    print(f"torch {torch.__version__}; per-call time in microseconds (best of 5 x {number} calls)")
    header = f"{'program':28} {'grad':5} {'eager':>8} {'aot_fn':>8} {'aot_eager':>10} {'conveyor':>9} {'wrappers':>9} {'graph':>8} {'aot_graph':>9} | {'ovh conv/aot':>12}"
    print(header)
    print("-" * len(header))
    for name, (fn, make) in PROGRAMS.items():
        for rg in (False, True):
            inputs = make(rg)
            aot_graphs: list[torch.fx.GraphModule] = []
            aot = aot_function(fn, fw_compiler=lambda gm, _: aot_graphs.append(gm) or gm)
            dyn = torch.compile(fn, backend="aot_eager")
            conv = conveyor.compile(fn, plugins=functionalize_only(), backend="eager")
            conv(*inputs)
            flat = list(inputs)
            wrappers = conv.last.compiled
            graph = bare_graph(conv)
            aot(*inputs)
            aot_graph = aot_graphs[0]
            t = {
                "eager": per_call_us(lambda: fn(*inputs), number),
                "aot_fn": per_call_us(lambda: aot(*inputs), number),
                "aot_eager": per_call_us(lambda: dyn(*inputs), number),
                "conveyor": per_call_us(lambda: conv(*inputs), number),
                "wrappers": per_call_us(lambda: wrappers(list(flat)), number),
                "graph": per_call_us(lambda: graph(list(flat)), number),
                "aot_graph": per_call_us(lambda: aot_graph(*flat), number),
            }
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
