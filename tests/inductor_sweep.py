"""OpInfo and module_db samples through the ``inductor`` backend, on both
entry points (``conveyor.compile`` and ``torch.compile(backend="conveyor")``),
compared with eager by ``conveyor.testing.check`` at Inductor's tolerances
(it fuses and reorders floating-point work, as ``torch.compile`` does).

    python tests/inductor_sweep.py --source opinfo --entry conveyor --limit 1 --out ind.jsonl
    python tests/inductor_sweep.py --source modules --entry dynamo --limit 2 --out ind.jsonl
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

import conveyor
import torch

sys.path.insert(0, str(Path(__file__).parent))

from module_db_sweep import MODULES, sample_modules  # noqa: E402
from opinfo_pipeline_sweep import OPINFOS, SampleResult, judge, sample_programs, summary  # noqa: E402

#: (atol, rtol): Inductor's C++ kernels reassociate reductions and use vectorized transcendental functions
TOLERANCE = {torch.float32: (1e-4, 1e-4), torch.float64: (1e-7, 1e-7)}

#: ops whose outputs are uninitialized or random: compared by nothing but metadata elsewhere; left out here
SKIP = frozenset(
    "empty empty_like empty_strided empty_permuted new_empty new_empty_strided bernoulli normal "
    "normal.number_mean uniform rand_like randn_like randint_like randint multinomial "
    "nn.functional.dropout nn.functional.dropout2d nn.functional.dropout3d nn.functional.alpha_dropout "
    "nn.functional.feature_alpha_dropout.with_train nn.functional.feature_alpha_dropout.without_train "
    "nn.functional.rrelu exponential geometric cauchy log_normal "
    "nn.functional.fractional_max_pool2d nn.functional.fractional_max_pool3d".split()
)

ENTRIES: dict[str, Callable[[Any], Any]] = {
    "conveyor": lambda f: conveyor.compile(f, backend="inductor"),
    "dynamo": lambda f: _dynamo_compile(f),
}


def _dynamo_compile(f: Any) -> Any:
    torch._dynamo.reset()  # past dynamo's recompile limit the rest would run eagerly without a word
    return torch.compile(f, backend="conveyor", options={"backend": "inductor"})


def run(fn: Any, tensors: list[Any], entry: str, dtype: torch.dtype, grad: bool, timeout: int) -> tuple[str, str]:
    """One sample through the inductor backend and the checker: ``(outcome, detail)``."""
    atol, rtol = TOLERANCE.get(dtype, (None, None))
    return judge(fn, tensors, ENTRIES[entry], atol, rtol, grad, timeout)


def samples(source: str, name: str, dtype: torch.dtype, grad: bool, limit: int) -> Iterator[tuple[Any, list, bool]]:
    if source == "opinfo":
        yield from sample_programs(name, dtype, grad, limit)
    else:
        for module, tensors in sample_modules(name, dtype, grad, limit):
            yield module, tensors, grad


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--source", default="opinfo", choices=["opinfo", "modules"])
    parser.add_argument("--entry", default="conveyor", choices=sorted(ENTRIES))
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--no-grad", action="store_true")
    parser.add_argument("--limit", type=int, default=1)
    parser.add_argument("--names", default="")
    parser.add_argument("--shard", default="0/1")
    parser.add_argument("--timeout", type=int, default=120)
    parser.add_argument("--out", default="inductor_sweep.jsonl")
    parser.add_argument("--summary", action="store_true")
    args = parser.parse_args(argv)
    if args.summary:
        print(summary(args.out))
        return
    universe = OPINFOS if args.source == "opinfo" else MODULES
    names = args.names.split(",") if args.names else sorted(n for n in universe if n not in SKIP)
    k, n = (int(x) for x in args.shard.split("/"))
    names = names[k::n]
    dtype = getattr(torch, args.dtype)
    with open(args.out, "a") as out:
        for name in names:
            try:
                progs = list(samples(args.source, name, dtype, not args.no_grad, args.limit))
            except Exception as exc:
                print(f"{name}: no samples ({type(exc).__name__}: {exc})", file=sys.stderr)
                continue
            for i, (fn, tensors, grad) in enumerate(progs):
                outcome, detail = run(fn, tensors, args.entry, dtype, grad, args.timeout)
                r = SampleResult(name, i, f"{args.entry}/inductor", args.dtype, grad, outcome, detail)
                out.write(json.dumps(asdict(r)) + "\n")
                out.flush()
                if outcome != "right":
                    print(f"{outcome} {name}[{i}]: {detail}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
