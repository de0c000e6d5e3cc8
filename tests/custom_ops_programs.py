"""Running the custom-op programs (``custom_ops_catalogue`` and ``2``; the ops of
``torch.testing._internal.custom_op_db`` on their OpInfo samples) against eager.

:func:`run` checks one program with ``conveyor.testing.check`` through one entry
(``conveyor.compile``, ``torch.compile(backend="conveyor")``, or ``aot_eager`` for
comparison) and one backend, without grad or with grad (every floating-point input
then a non-leaf requiring grad, as ``dynamo_repro_programs.with_grad`` makes them).
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable
from typing import Any

import conveyor
import custom_ops_catalogue as cat
import custom_ops_catalogue2 as cat2  # noqa: F401  (registers its programs; TAGGED, read by tests)
import custom_ops_catalogue3  # noqa: F401
import custom_ops_catalogue4  # noqa: F401
import torch
from conveyor.testing import check
from conveyor.testing.opinfo import sample_call
from dynamo_repro_programs import TOLERANCE, with_grad

PROGRAMS = cat.PROGRAMS


def compiler(entry: str, backend: str = "eager") -> Callable[[Any], Any]:
    """``conveyor.compile`` (``"conveyor"``), ``torch.compile(backend="conveyor")``
    (``"dynamo"``) or ``torch.compile(backend="aot_eager")`` (``"aot_eager"``)."""

    def one(f: Any) -> Any:
        if entry == "conveyor":
            return conveyor.compile(f, backend=backend)
        torch._dynamo.reset()
        if entry == "aot_eager":
            return torch.compile(f, backend="aot_eager")
        if backend == "eager":
            return torch.compile(f, backend="conveyor")
        return torch.compile(f, backend="conveyor", options={"backend": backend})

    return one


def has_float_input(name: str) -> bool:
    p = PROGRAMS[name]
    return p.grad and with_grad(p.make()) is not None


def run(name: str, entry: str, backend: str = "eager", grad: bool = False) -> None:
    """Check program ``name`` against eager (``AssertionError`` on a difference)."""
    p = PROGRAMS[name]
    torch.manual_seed(0)
    values = p.make()
    if grad:
        made = with_grad(values)
        assert made is not None, f"{name} has no floating-point input"
        values = made
    atol, rtol = TOLERANCE[backend]
    mode = torch.inference_mode() if p.inference else contextlib.nullcontext()
    try:
        with torch._dynamo.config.patch(dict(p.dynamo_config)), mode:
            check(p.fn, *values, compile=compiler(entry, backend), atol=atol, rtol=rtol)
    finally:
        torch._dynamo.reset()


def custom_op_db_samples(limit: int = 2) -> list[tuple[str, int, bool]]:
    """``(op name, sample index, supports autograd)`` for the first ``limit`` float32
    samples of each op in ``custom_op_db``."""
    from torch.testing._internal.custom_op_db import custom_op_db

    out = []
    for info in custom_op_db:
        n = sum(1 for _ in info.sample_inputs("cpu", torch.float32, requires_grad=False))
        out += [(info.name, i, info.supports_autograd) for i in range(min(n, limit))]
    return out


def run_custom_op_db(op_name: str, index: int, entry: str, grad: bool) -> None:
    """Check sample ``index`` of ``custom_op_db``'s ``op_name`` (with grad: its
    float inputs as leaves requiring grad, where the op supports autograd)."""
    from torch.testing._internal.custom_op_db import custom_op_db

    info = next(i for i in custom_op_db if i.name == op_name)
    torch.manual_seed(0)
    sample = list(info.sample_inputs("cpu", torch.float32, requires_grad=grad))[index]
    fn, tensors = sample_call(info.op, sample)
    try:
        check(fn, *tensors, compile=compiler(entry), check_grads=grad)
    finally:
        torch._dynamo.reset()


def quiet_compiler(entry: str) -> Callable[[Any], Any]:
    """:func:`compiler` for ``entry``, its warnings silenced (the tests of programs
    that need several calls)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", category=UserWarning)
        return compiler(entry)


def quiet_call(fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` without conveyor's warnings that it runs a program eagerly or compiles it."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="conveyor: (running|compiling)", category=UserWarning)
        return fn(*args)
