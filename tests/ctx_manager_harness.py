"""Running the context-manager programs (``ctx_manager_catalogue``, ``2`` and ``3``) against eager.

:func:`run` checks one program with ``conveyor.testing.check`` through one entry
(``conveyor.compile``, ``torch.compile(backend="conveyor")`` or ``aot_eager`` for
comparison), without grad or with grad (floating-point inputs as non-leaves requiring
grad, as ``dynamo_repro_programs.with_grad`` makes them). Each side calls the program
twice (a compiled program's first call traces, later ones replay), each call from the
same global state, under the program's *outer* setting; the global settings after each
call (:func:`settings`: grad and inference mode, default dtype and device, autocast,
torch-function and saved-tensor-hook switches, deterministic algorithms, matmul
precision, SDPA backends, the profiler) and which outputs are inference tensors must
be eager's, which the checker does not compare.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any

import ctx_manager_catalogue as cat
import ctx_manager_catalogue2  # noqa: F401  (registers its programs)
import ctx_manager_catalogue3  # noqa: F401
import torch
from conveyor.testing import check
from custom_ops_programs import compiler
from dynamo_repro_programs import with_grad

PROGRAMS = cat.PROGRAMS


def settings() -> dict[str, Any]:
    """The thread- and process-global settings a program may change."""
    import torch.nn.attention as attention

    return {
        "grad mode": torch.is_grad_enabled(),
        "inference mode": torch.is_inference_mode_enabled(),
        "default dtype": torch.get_default_dtype(),
        "default device": str(torch.get_default_device()),
        "autocast cpu": (torch.is_autocast_enabled("cpu"), torch.get_autocast_dtype("cpu")),
        "autocast cuda": (torch.is_autocast_enabled("cuda"), torch.get_autocast_dtype("cuda")),
        "autocast cache": torch.is_autocast_cache_enabled(),
        "torch function": torch._C._is_torch_function_enabled(),
        "saved tensor hooks": torch._C._autograd._saved_tensors_hooks_is_enabled(),
        "deterministic": torch.are_deterministic_algorithms_enabled(),
        "matmul precision": torch.get_float32_matmul_precision(),
        "sdpa backends": tuple(attention._cur_sdpa_kernel_backends()),
        "profiler": torch.autograd._profiler_enabled(),
    }


def _enter(ctx: Any) -> Any:
    ctx.__enter__()
    cat.ENTERED.append(ctx)
    return ctx


#: the setting every call of a program is made under
OUTER: dict[str, Callable[[], Any]] = {
    "grad": torch.enable_grad,
    "no_grad": torch.no_grad,
    "inference": torch.inference_mode,
    "autocast": lambda: torch.autocast("cpu", dtype=torch.bfloat16),
    "profiler": lambda: torch.autograd.profiler.profile(),
    "entered_no_grad": contextlib.nullcontext,
    "entered_autocast": contextlib.nullcontext,
}
#: a context the caller enters before each call, for the program to exit
ENTER: dict[str, Callable[[], Any]] = {
    "entered_no_grad": torch.no_grad,
    "entered_autocast": lambda: torch.autocast("cpu", dtype=torch.bfloat16),
}


@contextlib.contextmanager
def _settings_put_back() -> Iterator[None]:
    """Close what the program left open, then put back grad mode, the default
    dtype and device and autocast as they were (a program that changed them
    without a context)."""
    grad, dtype = torch.is_grad_enabled(), torch.get_default_dtype()
    autocast = [(d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in ("cpu", "cuda")]
    try:
        yield
    finally:
        while cat.LEFT_OPEN:
            cat.LEFT_OPEN.pop().__exit__(None, None, None)
        while cat.ENTERED:  # the program did not exit it
            cat.ENTERED.pop().__exit__(None, None, None)
        torch.set_default_device(None)
        torch._C._set_grad_enabled(grad)
        torch.set_default_dtype(dtype)
        for d, on, dt in autocast:
            torch.set_autocast_enabled(d, on)
            torch.set_autocast_dtype(d, dt)


def twice(f: Callable[..., Any], outer: str, log: list[dict[str, Any]]) -> Callable[..., Any]:
    """``f`` called twice (its results as a tuple), each call from the same state
    under ``outer``; the settings after each call appended to ``log``."""

    def calls(*args: Any) -> tuple[Any, Any]:
        outs = []
        for _ in range(2):
            with _settings_put_back():
                if outer in ENTER:
                    _enter(ENTER[outer]())
                outs.append(f(*args))
                log.append(settings())
        return outs[0], outs[1]

    return calls


def run(name: str, entry: str, grad: bool = False) -> None:
    """Check program ``name`` against eager (``AssertionError`` on a difference)."""
    p = PROGRAMS[name]
    torch.manual_seed(0)
    values = p.make()
    if grad:
        made = with_grad(values)
        assert made is not None, f"{name} has no floating-point input"
        values = made
    eager_log: list[dict[str, Any]] = []
    compiled_log: list[dict[str, Any]] = []
    compile_ = compiler(entry)
    try:
        with OUTER[p.outer]():
            before = settings()
            checked = check(
                twice(p.fn, p.outer, eager_log),
                *values,
                compile=lambda _: twice(compile_(p.fn), p.outer, compiled_log),
            )
            assert settings() == before, "the harness did not put the settings back"
    finally:
        torch._dynamo.reset()
    for i, (e, c) in enumerate(zip(eager_log, compiled_log, strict=True)):
        diff = {k: (c[k], e[k]) for k in e if c[k] != e[k]}
        assert not diff, f"settings after call {i + 1} (compiled, eager): {diff}"
    inference = [_inference(checked.eager_out), _inference(checked.compiled_out)]
    assert inference[1] == inference[0], f"outputs that are inference tensors: {inference[1]} != eager {inference[0]}"


def _inference(out: Any) -> list[bool]:
    import torch.utils._pytree as pytree

    return [t.is_inference() for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor)]
