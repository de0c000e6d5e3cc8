"""What the backend takes from the installed torch, found by probing it.

Note [Probing Inductor]: the backend calls three of Inductor's internals,
which move between torch releases without notice:

* the compiler of one graph that AOTAutograd calls for each forward and
  backward graph, ``torch._inductor.compile_fx.compile_fx_inner(gm,
  example_inputs, **kwargs)`` (the graph flat, aten-level and functional,
  its ``node.meta["val"]`` set; returns a callable taking the inputs as one
  list, which it may clear);
* the decomposition table Inductor's own ``compile_fx`` hands AOTAutograd,
  ``torch._inductor.decomposition.select_decomp_table()``: Inductor lowers
  the ops left after it and falls back to aten for the rest;
* its configuration module (``torch._inductor.config``, ``config.patch``),
  for the stage's ``config`` option.

:func:`probe` looks for each by what it is (a name, a callable, the keyword
arguments the backend passes), never by torch's version number, and is the
stage's ``StageSpec.probe``: a pipeline that chooses the ``inductor``
backend fails while it is built, with a ``StageError`` naming the stage and
what is missing, instead of at the first compile. A pipeline that does not
choose it never probes it.

What Inductor's FX graph cache needs (a ``TracingContext`` of a fake mode
with a ``ShapeEnv``) is probed apart, in ``fx_cache.api``, and is optional:
a torch without it compiles every graph with the cache off (Note [Inductor's
FX graph cache]).

A C++ compiler is needed only for graphs on CPU (Inductor's CPU code is C++
it builds; on CUDA it writes Triton), so :func:`require_cxx` is asked at
compile time, once the inputs' devices are known.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from conveyor import StageError

STAGE = "inductor"

#: keyword arguments the backend passes to ``compile_fx_inner``
KEYWORDS = ("is_backward",)


@dataclass(frozen=True)
class InductorApi:
    """The Inductor internals the backend calls (Note [Probing Inductor]).

    :ivar compile_graph: ``compile_fx_inner``.
    :ivar decompositions: ``select_decomp_table``.
    :ivar config: ``torch._inductor.config``.
    :ivar replace_random: ``replace_random_passes``, the pass of Inductor's
        joint-graph passes that turns ``aten.rand`` (and the ops decomposed to
        it: ``rand_like``, dropout) into Inductor's own random ops, which its
        lowering requires (Note [Random ops in the inductor backend]).
    """

    compile_graph: Callable[..., Any]
    decompositions: Callable[[], dict[Any, Callable[..., Any]]]
    config: Any
    replace_random: Callable[[Any, Any], Any]


def probe() -> None:
    """The stage's probe: raises a ``StageError`` naming what this torch lacks."""
    api()


@functools.cache
def api() -> InductorApi:
    """Inductor's internals, found once (a failed probe is not remembered)."""
    compile_graph = _find("torch._inductor.compile_fx", "compile_fx_inner")
    try:
        params = inspect.signature(compile_graph).parameters
    except (TypeError, ValueError) as exc:
        raise StageError(STAGE, f"cannot read compile_fx_inner's signature ({exc})") from exc
    positional = [p for p in params.values() if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    takes_any = any(p.kind is p.VAR_KEYWORD for p in params.values())
    missing = [k for k in KEYWORDS if k not in params and not takes_any]
    if len(positional) < 2 or missing:
        raise StageError(
            STAGE,
            f"this torch's torch._inductor.compile_fx.compile_fx_inner{inspect.signature(compile_graph)} does not "
            f"take (gm, example_inputs, {', '.join(k + '=' for k in KEYWORDS)}...) as conveyor_inductor expects",
        )
    decompositions = _find("torch._inductor.decomposition", "select_decomp_table")
    config = _module("torch._inductor.config")
    if not callable(getattr(config, "patch", None)):
        raise StageError(STAGE, "this torch's torch._inductor.config has no patch()")
    passes = _find("torch._inductor.fx_passes.replace_random", "replace_random_passes")
    set_fake_mode = getattr(getattr(_module("torch._inductor.virtualized"), "V", None), "set_fake_mode", None)
    if not callable(set_fake_mode):
        raise StageError(STAGE, "this torch's torch._inductor.virtualized.V has no set_fake_mode()")

    def replace_random(gm: Any, fake_mode: Any) -> Any:
        with set_fake_mode(fake_mode):  # the pass makes its seeds' fake values in Inductor's fake mode
            return passes(gm)

    return InductorApi(compile_graph, decompositions, config, replace_random)


def _module(name: str) -> Any:
    import importlib

    try:
        return importlib.import_module(name)
    except ImportError as exc:
        raise StageError(STAGE, f"this torch has no {name} ({exc}); conveyor_inductor needs Inductor") from exc


def _find(module: str, name: str) -> Callable[..., Any]:
    found = getattr(_module(module), name, None)
    if not callable(found):
        raise StageError(STAGE, f"this torch has no {module}.{name}, Inductor's entry conveyor_inductor calls")
    return found  # type: ignore[no-any-return]


def require_cxx() -> str:
    """The C++ compiler Inductor will build CPU kernels with; a ``StageError``
    that says what to do when there is none."""
    config = api().config
    cxx = getattr(getattr(config, "cpp", None), "cxx", None)
    return _cxx(tuple(cxx) if isinstance(cxx, (list, tuple)) else (cxx,))


@functools.cache
def _cxx(candidates: tuple[Any, ...]) -> str:
    """The first of ``candidates`` that runs (Inductor's own search when this
    torch has it); found once per candidate list, a failure not remembered."""
    import shutil
    import subprocess

    get_cpp_compiler: Callable[[], Any] | None
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler
    except ImportError:
        get_cpp_compiler = None
    if get_cpp_compiler is not None:
        try:
            return str(get_cpp_compiler())
        except Exception as exc:
            cause = f"{type(exc).__name__}: {exc}".strip()
    else:
        for name in candidates:
            path = shutil.which(name) if isinstance(name, str) else None
            if path is None:
                continue
            try:
                subprocess.check_output([path, "--version"], stderr=subprocess.STDOUT)
            except (OSError, subprocess.SubprocessError):
                continue
            return path
        cause = "none found"
    tried = ", ".join(repr(c) for c in candidates if c is not None) or "none"
    raise StageError(
        STAGE,
        f"no C++ compiler: Inductor builds its CPU kernels with one (tried {tried}; {cause}). Install g++ or "
        "clang++ (or set CXX, or torch._inductor.config.cpp.cxx), or choose another backend (backend='eager')",
    )
