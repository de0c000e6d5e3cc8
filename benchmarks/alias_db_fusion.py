"""A fusion pass over generated graphs, with the alias analysis updated in place
after every merge versus rebuilt after every merge (pytorch/pytorch PR 42141).

The graphs are chains of pointwise ops with in-place ops interleaved (some on
the chain's own value, some on graph inputs the chains read), so some merges
are refused by the analysis. The pass walks the graph once: a pointwise or
in-place op whose first operand comes out of a group is merged into that group
when the analysis says it can move next to it, else it starts a new group.

Run: ``.venv/bin/python benchmarks/alias_db_fusion.py [sizes...]``. The
rebuild variant is skipped where one rebuild times the number of merges would
exceed ``--rebuild-budget`` seconds (default 60); the estimate is printed.
The generated graph is moved out of the cyclic garbage collector's sight
(``gc.freeze``) before each timed pass, so that full collections walking the
whole graph, which a C++ IR would not pay, do not blur the scaling.
"""

from __future__ import annotations

import argparse
import gc
import operator
import random
import time

import torch
import torch.fx
from conveyor_alias_db import AliasDb, group_of

aten = torch.ops.aten
POINTWISE = (aten.add.Tensor, aten.mul.Tensor, aten.sin.default, aten.relu.default, aten.neg.default)
IN_PLACE = (aten.add_.Tensor, aten.mul_.Tensor)
FUSIBLE = frozenset(POINTWISE + IN_PLACE)
N_INPUTS = 8


def generate(n_nodes: int, seed: int = 0) -> torch.fx.Graph:
    """About ``n_nodes`` nodes: chains of 4 to 16 pointwise ops, in-place ops
    interleaved, each chain ending in an in-place update of an input (as an
    optimizer step does); the graph returns its inputs. (Returning every chain's
    result instead would make each merge O(graph) inside FX itself: replacing a
    use in the output node rebuilds its whole argument tuple.)"""
    rng = random.Random(seed)
    graph = torch.fx.Graph()
    inputs = [graph.placeholder(f"x{i}") for i in range(N_INPUTS)]
    while len(graph.nodes) < n_nodes:
        value = inputs[rng.randrange(N_INPUTS)]
        for _ in range(rng.randint(4, 16)):
            roll = rng.random()
            if roll < 0.1:
                graph.call_function(aten.add_.Tensor, (inputs[rng.randrange(N_INPUTS)], 1.0))  # writes an input
            elif roll < 0.2:
                value = graph.call_function(aten.mul_.Tensor, (value, 2.0))  # writes the chain's value
            op = POINTWISE[rng.randrange(len(POINTWISE))]
            if op in (aten.add.Tensor, aten.mul.Tensor):
                value = graph.call_function(op, (value, inputs[rng.randrange(N_INPUTS)]))
            else:
                value = graph.call_function(op, (value,))
        graph.call_function(aten.add_.Tensor, (inputs[rng.randrange(N_INPUTS)], value))
    graph.output(tuple(inputs))
    return graph


def _source_group(node: torch.fx.Node) -> torch.fx.Node | None:
    first = node.args[0]
    if isinstance(first, torch.fx.Node) and first.target is operator.getitem and group_of(first.args[0]) is not None:
        return first.args[0]
    return None


def fuse(graph: torch.fx.Graph, rebuild: bool) -> tuple[AliasDb, int, int]:
    """Group chains of fusible ops; return the analysis, the merges and the refused merges."""
    db = AliasDb.from_graph(graph, verify_updates=False)
    merged = refused = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target not in FUSIBLE:
            continue
        group = _source_group(node)
        try:
            if group is None:
                raise ValueError("no group to merge into")
            db.merge_into_group(group, node)
            merged += 1
        except ValueError:
            refused += group is not None
            db.create_group(node)
        if rebuild:
            db = AliasDb.from_graph(graph, verify_updates=False)
    return db, merged, refused


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("sizes", nargs="*", type=int, default=[1000, 4000, 16000, 64000])
    parser.add_argument("--rebuild-budget", type=float, default=60.0)
    args = parser.parse_args()

    fuse(generate(200), rebuild=False)  # warm the per-op schema cache
    print(
        f"{'nodes':>7} {'merges':>7} {'refused':>7} {'in place (s)':>13} {'us/merge':>9} {'rebuild every merge (s)':>24}"
    )
    in_place_times = {}
    for size in args.sizes:
        graph = generate(size)
        gc.collect()
        gc.freeze()
        start = time.perf_counter()
        db, merges, refused = fuse(graph, rebuild=False)
        in_place_times[size] = elapsed = time.perf_counter() - start
        gc.unfreeze()
        if size == min(args.sizes):
            db.verify()  # the analysis updated in place equals a rebuild of the fused graph
        fresh = generate(size)
        start = time.perf_counter()
        AliasDb.from_graph(fresh, verify_updates=False)
        estimate = (time.perf_counter() - start) * sum(1 for n in fresh.nodes if n.target in FUSIBLE)
        if estimate > args.rebuild_budget:
            rebuilt = f"skipped (est. ~{estimate:.0f})"
        else:
            gc.collect()
            gc.freeze()
            start = time.perf_counter()
            fuse(fresh, rebuild=True)
            rebuilt = f"{time.perf_counter() - start:.2f}"
            gc.unfreeze()
        per_merge = elapsed / max(merges, 1) * 1e6
        print(f"{size:>7} {merges:>7} {refused:>7} {elapsed:>13.3f} {per_merge:>9.0f} {rebuilt:>24}", flush=True)
    sizes = sorted(in_place_times)
    for small, big in zip(sizes, sizes[1:]):
        print(
            f"in place {big}/{small}: {in_place_times[big] / in_place_times[small]:.2f}x for {big / small:.0f}x nodes"
        )


if __name__ == "__main__":
    main()
