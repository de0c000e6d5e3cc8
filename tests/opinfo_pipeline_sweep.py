"""OpInfo through the full pipeline: every op in ``op_db``, its samples,
compiled with every installed stage and the ``eager`` or ``triton`` backend,
each sample compared with eager by ``conveyor.testing.check`` (outputs,
aliasing, inputs after the call, and gradients where the op has them).

Each sample ends in one of:

* ``right``: compiled, and matched eager (for ``triton``, nodes the backend
  does not lower ran as aten calls; those are in its report, not counted
  here as fallbacks);
* ``fallback``: a documented fallback: the program (or a graph dynamo made
  of it, where conveyor compiled a data-dependent program through dynamo:
  core Note [Programs only dynamo can split]) ran eagerly with conveyor's
  warning ("conveyor: running ... eagerly: <cause>"), or conveyor refused it
  with a documented ``CaptureError``;
* ``deviation``: a documented deviation from eager where eager's own result
  is demonstrably wrong (:data:`DEVIATIONS`): the values match eager's and
  the compiled gradient passes ``torch.autograd.gradcheck`` (in float64),
  which eager's fails;
* ``wrong``: anything else (a difference from eager, or an error eager does
  not raise).

Run it outside CI (the triton interpreter makes it long)::

    python tests/opinfo_pipeline_sweep.py --backend triton --dtype float32 --grad --limit 4 --out sweep.jsonl

It appends one JSON line per sample to ``--out`` and skips ops already
there, so a run that was stopped can be resumed; ``--summary`` prints the
counts of a file. ``tests/test_opinfo_pipeline.py`` runs a fixed subset in CI.
"""

from __future__ import annotations

import os

if __name__ == "__main__":
    os.environ.setdefault("TRITON_INTERPRET", "1")  # before anything imports triton

import argparse
import json
import signal
import sys
import warnings
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from typing import Any

import conveyor
import torch
from conveyor.errors import CaptureError
from conveyor.testing import check
from conveyor.testing.opinfo import sample_call
from torch.testing._internal.common_methods_invocations import op_db

#: (atol, rtol) by dtype; None: assert_close's defaults (exact for integers)
TOLERANCE: dict[tuple[str, torch.dtype], tuple[float | None, float | None]] = {
    ("eager", torch.float32): (1e-5, 1.3e-5),
    ("triton", torch.float32): (1e-4, 1e-4),
    ("eager", torch.float16): (1e-3, 1e-3),
    ("triton", torch.float16): (1e-2, 1e-2),
    ("eager", torch.bfloat16): (1e-2, 1e-2),
    ("triton", torch.bfloat16): (3e-2, 2e-2),
}

#: ops whose outputs hold uninitialized memory: compared by metadata only
#: (their result goes through ``zeros_like``, which keeps dtype, shape and strides)
UNINITIALIZED = frozenset("empty empty_like empty_strided empty_permuted new_empty new_empty_strided".split())

#: op -> why conveyor's gradient differs from eager's (eager's is wrong: it
#: fails gradcheck); each sample is checked against gradcheck instead
DEVIATIONS: dict[str, str] = {
    "as_strided_scatter": "torch 2.13's as_strided_scatter derivative gives self the gradient inside the "
    "scattered window and zero outside, the reverse of the true one (torch.autograd.gradcheck fails on eager); "
    "conveyor_functionalize spells the op as index_put into self's buffer, whose gradient passes gradcheck",
}

OPINFOS = {(o.name + ("." + o.variant_test_name if o.variant_test_name else "")): o for o in op_db}


@dataclass(frozen=True)
class SampleResult:
    """One sample's outcome (one JSON line of a sweep file)."""

    op: str
    index: int
    backend: str
    dtype: str
    grad: bool
    outcome: str  # "right" | "fallback" | "deviation" | "wrong"
    detail: str = ""

    def __post_init__(self) -> None:
        if self.outcome not in ("right", "fallback", "deviation", "wrong"):
            raise ValueError(f"unknown outcome {self.outcome!r}")


def _with_nonfinite(t: torch.Tensor) -> torch.Tensor:
    """``t`` with NaN, inf, -inf and -0.0 written over its first elements
    (where decompositions most often part from eager's kernels)."""
    out = t.detach().clone()
    flat = out.view(-1) if out.is_contiguous() else out.reshape(-1)
    special = torch.tensor([float("nan"), float("inf"), float("-inf"), -0.0], dtype=t.dtype)[: flat.numel()]
    flat[: special.numel()] = special
    if not out.is_contiguous():
        out = flat.view(out.shape)
    return out.requires_grad_(t.requires_grad)


def sample_programs(
    name: str, dtype: torch.dtype, grad: bool, limit: int, nonfinite: bool = False
) -> Iterator[tuple[Callable[..., Any], list[Any], bool]]:
    """Up to ``limit`` samples of op ``name`` as ``(fn, tensors, grad)``: ``fn``
    takes the sample's tensors (input, args, kwargs flattened) and calls the
    op; ``grad``: the samples require grad (asked for, and the op has
    gradients in ``dtype``); ``nonfinite``: non-finite values written into
    the first floating input (samples with none are left out)."""
    op = OPINFOS[name]
    if dtype not in op.supported_dtypes("cpu"):
        return
    grad = grad and op.supports_autograd and dtype in op.supported_backward_dtypes("cpu")
    torch.manual_seed(0)  # samples are random: the same ones each run
    for i, s in enumerate(op.sample_inputs("cpu", dtype, requires_grad=grad)):
        if i >= limit:
            return
        call, tensors = sample_call(op.op, s)
        fn = _zeros_like_result(call) if name in UNINITIALIZED else call
        if nonfinite:
            floating = [
                j for j, t in enumerate(tensors) if t.is_floating_point() and t.numel() and t.layout is torch.strided
            ]
            if not floating:
                continue
            tensors[floating[0]] = _with_nonfinite(tensors[floating[0]])
        yield fn, tensors, grad


def _zeros_like_result(call: Callable[..., Any]) -> Callable[..., Any]:
    """``call`` with its result replaced by zeros (an op that returns uninitialized memory)."""

    def fn(*tensors: Any) -> Any:
        return torch.zeros_like(call(*tensors))

    return fn


class _Timeout(Exception):
    pass


def _alarm(signum: int, frame: Any) -> None:
    raise _Timeout


def _gradcheck_compiled(fn: Callable[..., Any], tensors: list[Any], backend: str) -> None:
    """``torch.autograd.gradcheck`` of ``fn`` compiled, on float64 copies of
    the floating inputs (Note: a documented deviation, :data:`DEVIATIONS`)."""
    inputs = [
        t.detach().double().requires_grad_(t.requires_grad) if isinstance(t, torch.Tensor) and t.is_floating_point()
        else t
        for t in tensors
    ]
    compiled = conveyor.compile(fn, backend=backend)
    torch.autograd.gradcheck(lambda *a: compiled(*a), inputs, raise_exception=True)


def run_sample(
    fn: Callable[..., Any],
    tensors: list[Any],
    backend: str,
    dtype: torch.dtype,
    grad: bool,
    timeout: int = 0,
    deviation: str = "",
) -> tuple[str, str]:
    """Compile ``fn`` with every installed stage and ``backend`` and check it
    against eager: ``(outcome, detail)``. ``deviation``: the op's documented
    deviation (:data:`DEVIATIONS`): if the gradients differ from eager's, the
    values are checked against eager and the gradient by gradcheck."""
    outcome, detail = _run_sample(fn, tensors, backend, dtype, grad, timeout)
    if outcome != "wrong" or not deviation or not grad:
        return outcome, detail
    values, detail = _run_sample(fn, tensors, backend, dtype, False, timeout)
    if values != "right":
        return "wrong", detail
    try:
        _gradcheck_compiled(fn, tensors, backend)
    except Exception as exc:
        return "wrong", f"documented deviation, but gradcheck fails: {type(exc).__name__}: {str(exc).splitlines()[0]}"
    return "deviation", deviation[:300]


def _run_sample(
    fn: Callable[..., Any], tensors: list[Any], backend: str, dtype: torch.dtype, grad: bool, timeout: int = 0
) -> tuple[str, str]:
    atol, rtol = TOLERANCE.get((backend, dtype), (None, None))

    def compile(f: Any) -> Any:
        return conveyor.compile(f, backend=backend)

    return judge(fn, tensors, compile, atol, rtol, grad, timeout)


def judge(
    fn: Any, tensors: list[Any], compile: Callable[[Any], Any], atol: Any, rtol: Any, grad: bool, timeout: int = 0
) -> tuple[str, str]:
    """One sample checked against eager: ``(outcome, detail)``, outcome one of
    right, fallback (a capture error or conveyor's warned eager run) and
    wrong (any other error, a mismatch, or ``timeout`` seconds passed); the
    sweeps of module_db and of the inductor backend judge theirs here too."""
    if timeout:
        signal.signal(signal.SIGALRM, _alarm)
        signal.alarm(timeout)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            check(fn, *tensors, compile=compile, atol=atol, rtol=rtol, check_grads=grad)
    except _Timeout:
        return "wrong", f"timeout after {timeout} s"
    except CaptureError as exc:
        return "fallback", f"CaptureError: {str(exc).splitlines()[0][:300]}"
    except Exception as exc:
        return "wrong", f"{type(exc).__name__}: {str(exc).splitlines()[0][:300] if str(exc) else ''}"
    finally:
        if timeout:
            signal.alarm(0)
    eager = [str(w.message) for w in caught if str(w.message).startswith("conveyor: running")]
    if eager:
        return "fallback", eager[0][:300]
    return "right", ""


def sweep(
    names: list[str],
    backend: str,
    dtype: torch.dtype,
    grad: bool,
    limit: int,
    timeout: int = 0,
    current: str = "",
    nonfinite: bool = False,
) -> Iterator[SampleResult]:
    """Every sample of every op in ``names``, one result each (``current``: a
    file to write each op's name to before its samples run)."""
    for name in names:
        if current:
            with open(current, "w") as f:
                f.write(name)
        try:
            programs = list(sample_programs(name, dtype, grad, limit, nonfinite))
        except Exception as exc:  # OpInfo's own sample generation failed: not ours to judge
            print(f"{name}: no samples ({type(exc).__name__}: {exc})", file=sys.stderr)
            continue
        for i, (fn, tensors, with_grad) in enumerate(programs):
            outcome, detail = run_sample(fn, tensors, backend, dtype, with_grad, timeout, DEVIATIONS.get(name, ""))
            yield SampleResult(name, i, backend, str(dtype).removeprefix("torch."), grad, outcome, detail)


def summary(path: str) -> str:
    """Counts per (backend, dtype, grad) of a sweep file, and the samples not right."""
    counts: dict[tuple[str, str, bool], Counter[str]] = {}
    others: list[str] = []
    with open(path) as f:
        for line in f:
            r = SampleResult(**json.loads(line))
            counts.setdefault((r.backend, r.dtype, r.grad), Counter())[r.outcome] += 1
            if r.outcome != "right":
                others.append(f"{r.outcome:8s} {r.backend} {r.dtype} grad={r.grad} {r.op}[{r.index}]: {r.detail}")
    lines = [
        f"{b} {d} grad={g}: {c['right']} right / {c['fallback']} fallback / {c['deviation']} deviation / "
        f"{c['wrong']} wrong"
        for (b, d, g), c in sorted(counts.items())
    ]
    return "\n".join(lines + sorted(others))


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--backend", default="eager", choices=["eager", "triton"])
    parser.add_argument("--dtype", default="float32")
    parser.add_argument("--grad", action="store_true", help="samples require grad; gradients are compared")
    parser.add_argument("--limit", type=int, default=4, help="samples per op")
    parser.add_argument("--nonfinite", action="store_true", help="write NaN, inf, -inf, -0.0 into each sample")
    parser.add_argument("--ops", default="", help="comma-separated op names (default: all of op_db)")
    parser.add_argument("--shard", default="0/1", help="i/n: every n-th op starting at i")
    parser.add_argument("--timeout", type=int, default=120, help="seconds per sample (0: none)")
    parser.add_argument("--out", default="opinfo_pipeline.jsonl")
    parser.add_argument("--summary", action="store_true", help="print the counts of --out and stop")
    args = parser.parse_args(argv)
    if args.summary:
        print(summary(args.out))
        return
    names = args.ops.split(",") if args.ops else sorted(OPINFOS)
    k, n = (int(x) for x in args.shard.split("/"))
    names = names[k::n]
    dtype = getattr(torch, args.dtype)
    done: set[str] = set()
    if os.path.exists(args.out):
        with open(args.out) as f:
            for line in f:
                r = json.loads(line)
                if (r["backend"], r["dtype"], r["grad"]) == (args.backend, args.dtype, args.grad):
                    done.add(r["op"])
    current = args.out + ".current"  # the op being swept: if the process dies, the rerun records it
    with open(args.out, "a") as out:
        if os.path.exists(current):
            with open(current) as f:
                crashed = f.read().strip()
            if crashed and crashed not in done and crashed in names:
                r = SampleResult(crashed, 0, args.backend, args.dtype, args.grad, "wrong", "the process aborted")
                out.write(json.dumps(asdict(r)) + "\n")
                out.flush()
                done.add(crashed)
        todo = [name for name in names if name not in done]
        for r in sweep(todo, args.backend, dtype, args.grad, args.limit, args.timeout, current, args.nonfinite):
            out.write(json.dumps(asdict(r)) + "\n")
            out.flush()
            if r.outcome != "right":
                print(f"{r.outcome} {r.op}[{r.index}]: {r.detail}", flush=True)
    if os.path.exists(current):
        os.remove(current)  # finished: no op aborted


if __name__ == "__main__":
    main(sys.argv[1:])
