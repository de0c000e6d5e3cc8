"""How the triton backend's fusion pass scales with the graph: 1k to 64k nodes.

The graphs repeat a transformer-style block traced with the backend's own
decompositions and functionalize off (so in-place writes stay in the graph):
a matmul (an aten fallback), bias add and GELU, a masked softmax, a layer
norm, an in-place accumulation into a per-block buffer and an in-place scale
of it, a view / permute / reshape round trip, and a residual add. Each block
has its own weights and buffer; the mask is shared, as an attention mask is.

The fusion pass is what ``conveyor_triton.lower`` runs before code generation:
the fuser copies the graph and analyses the copy with ``AliasDb``, and
decides the groups (memory order and conflicts from the analysis, cycle
checks on its step graph), forming each in the copy as it decides it through
``AliasDb.create_group`` / ``merge_into_group`` / ``merge_groups`` (Note
[Fusion in the AliasDb]). It runs with the debug
rebuild-check (``CONVEYOR_ALIAS_DB_VERIFY``) off. The *rebuild every merge*
variant makes the same merges but analyses the whole copy again after each
one, as a fuser without PR 42141's in-place update would; it runs only where
its estimate (one rebuild times the number of merges) is inside
``--rebuild-budget`` seconds.

    OMP_NUM_THREADS=1 .venv/bin/python benchmarks/fusion_scaling.py [sizes...]

The cyclic garbage collector is off during each timed pass, as ``timeit``
has it (``--gc`` keeps it on): its full collections walk every object alive,
the graphs included, so with it on a pass that allocates O(n) objects pays
O(n) collections of O(n) objects, a cost of CPython that a C++ IR does not
have and that blurs the scaling of the pass itself.
"""

from __future__ import annotations

import os

os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton (CPU only here)
os.environ["CONVEYOR_ALIAS_DB_VERIFY"] = "0"  # the debug rebuild-check off

import argparse  # noqa: E402
import gc  # noqa: E402
import time  # noqa: E402

import torch  # noqa: E402
import torch.fx  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from conveyor_alias_db import AliasDb, input_aliasing  # noqa: E402
from conveyor_triton.classify import classify  # noqa: E402
from conveyor_triton.decompose import table  # noqa: E402
from conveyor_triton.fusion import Fuser  # noqa: E402
from torch.fx.experimental.proxy_tensor import make_fx  # noqa: E402

ROWS, WIDTH = 32, 64


def block(x, w, b, g, buf, mask):  # type: ignore[no-untyped-def]
    h = F.gelu(torch.mm(x, w) + b)
    a = torch.softmax(h + mask, -1)
    h = F.layer_norm(h * a, (WIDTH,), g, b)
    buf.add_(h)  # in place: functionalize off
    v = h.view(ROWS, 2, WIDTH // 2).transpose(1, 2).reshape(ROWS, WIDTH)
    y = x + v.relu() * 0.5
    buf.mul_(0.9)
    return y + buf.sum(-1, keepdim=True)


def generate(n_nodes: int) -> torch.fx.Graph:
    """About ``n_nodes`` nodes: ``block`` repeated, each with its own weights and buffer."""
    shapes = [(ROWS, WIDTH), (WIDTH, WIDTH), (WIDTH,), (WIDTH,), (ROWS, WIDTH), (ROWS, WIDTH)]
    traced = make_fx(block, tracing_mode="fake", decomposition_table=table())(*[torch.randn(s) for s in shapes])
    inputs = [n for n in traced.graph.nodes if n.op == "placeholder"]
    body = [n for n in traced.graph.nodes if n.op not in ("placeholder", "output")]
    result = next(n for n in traced.graph.nodes if n.op == "output").args[0]
    blocks = max(1, n_nodes // (len(body) + 4))
    graph = torch.fx.Graph()

    def placeholder(like: torch.fx.Node, name: str) -> torch.fx.Node:
        node = graph.placeholder(name)
        node.meta = dict(like.meta)
        return node

    x, mask = placeholder(inputs[0], "x"), placeholder(inputs[5], "mask")
    weights = [[placeholder(p, f"{p.name}_{i}") for p in inputs[1:5]] for i in range(blocks)]
    for own in weights:
        env = {inputs[0]: x, inputs[5]: mask, **dict(zip(inputs[1:5], own, strict=True))}
        for node in body:
            env[node] = graph.node_copy(node, env.__getitem__)
        x = env[result]  # type: ignore[index]
    graph.output(x)
    return graph


def fusion_pass(graph: torch.fx.Graph, rebuild: bool = False) -> tuple[Fuser, float, int]:
    """Run the fusion pass; return the fuser, its seconds, and the merges."""
    values = [n.meta["val"] for n in graph.nodes if n.op == "placeholder"]
    start = time.perf_counter()
    classes = {n: classify(n) for n in graph.nodes if n.op == "call_function"}
    fuser = Fuser(graph, classes, input_aliasing(graph, values), rebuild=rebuild)
    fuser.order()
    seconds = time.perf_counter() - start
    merges = sum(len(s.group.members) - 1 for s in fuser.steps if s.group is not None and s.group.members)
    return fuser, seconds, merges


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("sizes", nargs="*", type=int, default=[1000, 4000, 16000, 64000])
    parser.add_argument("--rebuild-budget", type=float, default=60.0)
    parser.add_argument("--rebuild-sizes", type=int, nargs="*", default=[250, 500, 1000])
    parser.add_argument("--gc", action="store_true", help="keep the cyclic garbage collector on while timing")
    args = parser.parse_args()
    quiet = (lambda: None) if args.gc else gc.disable

    fusion_pass(generate(200))  # warm the per-op caches
    collector = "on" if args.gc else "off while timing"
    print(f"torch {torch.__version__}, OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}, rebuild-check off, gc {collector}")
    header = f"{'nodes':>7} {'groups':>6} {'merges':>7} {'fusion (s)':>10}"
    print(f"{header} {'rebuild every merge (s)':>24}")
    totals: dict[int, float] = {}
    for size in args.sizes:
        graph = generate(size)
        nodes = len(graph.nodes)
        gc.collect()
        quiet()
        fuser, seconds, merges = fusion_pass(graph)
        gc.enable()
        totals[nodes] = seconds
        groups = sum(1 for s in fuser.steps if s.group is not None and s.group.members)
        if size == min(args.sizes):
            fuser.working.alias_db.verify()  # the analysis updated in place equals a rebuild
        start = time.perf_counter()
        AliasDb.from_graph(fuser.working.graph, verify_updates=False)
        estimate = (time.perf_counter() - start) * (merges + groups)  # one rebuild per group update
        if estimate > args.rebuild_budget:
            rebuilt = f"skipped (est. ~{estimate:.0f})"
        else:
            graph = generate(size)
            gc.collect()
            quiet()
            _, again, _ = fusion_pass(graph, rebuild=True)
            gc.enable()
            rebuilt = f"{again:.2f}"
        print(f"{nodes:>7} {groups:>6} {merges:>7} {seconds:>10.2f} {rebuilt:>24}", flush=True)
    sizes = sorted(totals)
    for small, big in zip(sizes, sizes[1:], strict=False):
        print(f"fusion pass {big}/{small} nodes: {totals[big] / totals[small]:.2f}x time for {big / small:.1f}x nodes")

    print("\nrebuild every merge vs in place, the same merges:")
    print(f"{'nodes':>7} {'merges':>7} {'in place (s)':>12} {'rebuild (s)':>11} {'ratio':>7}")
    rebuilt_times: dict[int, float] = {}
    for size in args.rebuild_sizes:
        times = []
        for rebuild in (False, True):
            graph = generate(size)
            gc.collect()
            quiet()
            _, seconds, merges = fusion_pass(graph, rebuild=rebuild)
            gc.enable()
            times.append(seconds)
        nodes = len(graph.nodes)
        rebuilt_times[nodes] = times[1]
        print(f"{nodes:>7} {merges:>7} {times[0]:>12.2f} {times[1]:>11.2f} {times[1] / times[0]:>6.0f}x", flush=True)
    sizes = sorted(rebuilt_times)
    for small, big in zip(sizes, sizes[1:], strict=False):
        ratio = rebuilt_times[big] / rebuilt_times[small]
        print(f"rebuild every merge {big}/{small} nodes: {ratio:.2f}x time for {big / small:.1f}x nodes")


if __name__ == "__main__":
    main()
