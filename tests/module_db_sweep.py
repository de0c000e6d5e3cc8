"""PyTorch's ``module_db`` through the full pipeline: every ``torch.nn``
module's ModuleInfo samples, built and called as the sample says, compiled
with every installed stage through ``conveyor.compile`` (``entry="conveyor"``)
or ``torch.compile(backend="conveyor")`` (``entry="dynamo"``), each compared
with eager by ``conveyor.testing.check`` (outputs, aliasing, inputs and
buffers after the call, input and parameter gradients).

Outcomes are those of ``opinfo_pipeline_sweep`` (``right``, ``fallback``,
``wrong``). ``training``: the module in train mode with inputs that require
grad (gradients compared), else eval mode without gradients.

    python tests/module_db_sweep.py --entry conveyor --training --out modules.jsonl
    python tests/module_db_sweep.py --summary --out modules.jsonl
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
from torch.testing._internal.common_modules import module_db

sys.path.insert(0, str(Path(__file__).parent))  # the OpInfo sweep beside this file

from opinfo_pipeline_sweep import TOLERANCE, SampleResult, judge, summary  # noqa: E402

#: module name -> ModuleInfo (a variant's name after a dot)
MODULES = {
    (m.name + ("." + m.variant_name if getattr(m, "variant_name", "") else "")): m for m in module_db
}

#: modules whose samples conveyor cannot compare (randomness of their own)
RANDOM = frozenset("nn.Dropout nn.Dropout1d nn.Dropout2d nn.Dropout3d nn.AlphaDropout nn.FeatureAlphaDropout "
                   "nn.RReLU".split())

ENTRIES: dict[str, Callable[[str], Callable[[Any], Any]]] = {
    "conveyor": lambda backend: lambda m: conveyor.compile(m, backend=backend),
    "dynamo": lambda backend: lambda m: _dynamo_compile(m, backend),
}


def _dynamo_compile(m: Any, backend: str) -> Any:
    """``torch.compile`` with a fresh dynamo: every sample calls the same
    ``_Call.forward``, and past dynamo's recompile limit it would run the
    rest eagerly without a word."""
    torch._dynamo.reset()
    return torch.compile(m, backend="conveyor", options={"backend": backend})


class _Call(torch.nn.Module):
    """A module called with a sample's forward arguments: tensors positional
    (so the checker clones and compares them), the rest kept as constants."""

    def __init__(self, module: torch.nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> None:
        super().__init__()
        import torch.utils._pytree as pytree

        self.module = module
        leaves, self._spec = pytree.tree_flatten((args, kwargs))
        self._positions = [k for k, v in enumerate(leaves) if isinstance(v, torch.Tensor)]
        self._tensors = [leaves[k] for k in self._positions]
        # tensors are not kept on the module: the checker deep-copies it (a non-leaf cannot be copied)
        self._leaves = [None if isinstance(v, torch.Tensor) else v for v in leaves]

    def tensors(self) -> list[torch.Tensor]:
        return self._tensors

    def forward(self, *tensors: Any) -> Any:
        import torch.utils._pytree as pytree

        filled = list(self._leaves)
        for k, t in zip(self._positions, tensors, strict=True):
            filled[k] = t
        args, kwargs = pytree.tree_unflatten(filled, self._spec)
        return self.module(*args, **kwargs)


def sample_modules(
    name: str, dtype: torch.dtype, training: bool, limit: int
) -> Iterator[tuple[torch.nn.Module, list[torch.Tensor]]]:
    """Up to ``limit`` samples of module ``name`` as ``(module, tensors)``:
    the module built from the sample's constructor arguments (in train mode
    when ``training``) wrapped to take the forward tensors positionally."""
    info = MODULES[name]
    if dtype not in info.dtypes:
        return
    torch.manual_seed(0)
    samples = info.module_inputs_func(info, device="cpu", dtype=dtype, requires_grad=training, training=training)
    for i, s in enumerate(samples):
        if i >= limit:
            return
        if s.forward_input is None:
            continue
        torch.manual_seed(i)
        m = info.module_cls(*s.constructor_input.args, **s.constructor_input.kwargs)
        m = m.to(dtype=dtype) if any(p.is_floating_point() for p in m.parameters()) else m
        m.train(training)
        if not training:
            m.requires_grad_(False)
        call = _Call(m, s.forward_input.args, s.forward_input.kwargs)
        tensors = call.tensors()
        del call._tensors
        if isinstance(m, torch.nn.modules.lazy.LazyModuleMixin):  # materialize its parameters first
            with torch.no_grad():
                call(*[t.detach().clone() for t in tensors])
        yield call, tensors


def sweep(
    names: list[str], entry: str, backend: str, dtype: torch.dtype, training: bool, limit: int, timeout: int = 0
) -> Iterator[SampleResult]:
    compile = ENTRIES[entry](backend)
    for name in names:
        try:
            programs = list(sample_modules(name, dtype, training, limit))
        except Exception as exc:
            print(f"{name}: no samples ({type(exc).__name__}: {exc})", file=sys.stderr)
            continue
        for i, (module, tensors) in enumerate(programs):
            outcome, detail = run_module(module, tensors, compile, backend, dtype, training, timeout)
            yield SampleResult(name, i, f"{entry}/{backend}", str(dtype).removeprefix("torch."), training,
                               outcome, detail)


def run_module(
    module: torch.nn.Module,
    tensors: list[torch.Tensor],
    compile: Callable[[Any], Any],
    backend: str,
    dtype: torch.dtype,
    training: bool,
    timeout: int = 0,
) -> tuple[str, str]:
    """One sample checked: ``(outcome, detail)`` as the OpInfo sweep's."""
    atol, rtol = TOLERANCE.get((backend, dtype), TOLERANCE.get(("triton", dtype), (None, None)))
    return judge(module, tensors, compile, atol, rtol, training, timeout)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--entry", default="conveyor", choices=sorted(ENTRIES))
    parser.add_argument("--backend", default="eager")
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--training", action="store_true")
    parser.add_argument("--limit", type=int, default=4)
    parser.add_argument("--modules", default="")
    parser.add_argument("--timeout", type=int, default=120)
    parser.add_argument("--out", default="module_db.jsonl")
    parser.add_argument("--summary", action="store_true")
    args = parser.parse_args(argv)
    if args.summary:
        print(summary(args.out))
        return
    names = args.modules.split(",") if args.modules else sorted(MODULES)
    with open(args.out, "a") as out:
        for r in sweep(names, args.entry, args.backend, getattr(torch, args.dtype), args.training, args.limit,
                       args.timeout):
            out.write(json.dumps(asdict(r)) + "\n")
            out.flush()
            if r.outcome != "right":
                print(f"{r.outcome} {r.op}[{r.index}]: {r.detail}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
