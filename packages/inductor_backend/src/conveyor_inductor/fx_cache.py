"""Where a graph is compiled, so that Inductor's FX graph cache can serve it.

Note [Inductor's FX graph cache]: ``compile_fx_inner`` looks a graph up in
Inductor's FX graph cache (``/tmp/torchinductor_$USER/fxgraph``, shared by
every process) only when a ``TracingContext`` is active whose fake mode has
a ``ShapeEnv``: the cache stores, with each compiled graph, the guards
Inductor added to that ``ShapeEnv`` about the graph's ``SymInt`` inputs, and
on a hit evaluates them on the new inputs (adding them to the ``ShapeEnv``
again). Without one it is bypassed ("No shape env"). Behind ``torch.compile``
dynamo's context is active; ``conveyor.compile`` has none, and its static
graphs come with a fake mode without a ``ShapeEnv``, so before this note
every ``conveyor.compile`` program was built from scratch in each process.

:func:`scope` decides, per graph, the fake mode and fake inputs it is
retraced and compiled with, and whether the cache may serve it:

* **static inputs** (no symbol anywhere): a fresh ``FakeTensorMode`` with an
  empty ``ShapeEnv``, fake inputs made in it from the plain-data
  descriptions of the request's (Note [Storing Inductor programs]: sizes,
  strides, storage offset, dtype, device, ``requires_grad``), and a
  ``TracingContext`` of that mode around the compile. The cache key is
  Inductor's: the graph's code, its constants' values, each input's
  metadata, the Inductor configuration and the compile's keyword arguments,
  so a different graph, size, stride, dtype or configuration is a miss.
  The ``ShapeEnv`` has no symbols, so no guard is stored or checked.
* **symbolic inputs whose every symbol is itself an input** (a ``SymInt``
  placeholder whose value is that symbol, backed by a hint: how dynamo lifts
  sizes): the request's own fake mode and ``ShapeEnv``, in the active
  ``TracingContext`` when its fake mode is the request's (dynamo's), else a
  new ``TracingContext`` of it. Inductor stores its guards over those inputs
  and checks them on a hit, adding them to the request's ``ShapeEnv``, which
  the caller turns into its run-time guards (Note [Symbolic sizes in the
  inductor backend]).
* **anything else** (a symbol only in a tensor's size, as in
  ``conveyor.compile``'s own symbolic graphs; an unbacked symbol; an input
  that cannot be described): compiled with ``fx_graph_cache`` off. Inductor
  prunes the stored guards to the ``SymInt`` inputs' symbols, so a hit there
  could skip an assumption Inductor made about a size (that ``s1 >= 2``, or
  that it is 6) and run its code where the assumption fails.

The key hashes the pickled ``GraphModule``, whose ``__dict__`` is pickled in
insertion order. Behind ``torch.compile``, dynamo makes every ``GraphModule``
lazy (``_LazyGraphModule``: its code is written at its first use, so
``_code`` comes last in its ``__dict__``), a plain one writes its code in
its constructor: the same graph had two keys, one per entry point, and a
program that dynamo compiled first, loaded from conveyor's disk cache in the
next process (outside dynamo), missed Inductor's cache and was built again.
:func:`plain_graph_modules` is where the backend retraces, so the graph
Inductor hashes is a plain ``GraphModule`` whichever entry point made it.

What is found in the installed torch (``TracingContext``, ``tracing``,
``ShapeEnv``, ``free_symbols``) is probed (:func:`api`); a torch without one
of them compiles every graph with the cache off, as before. Whatever the
case, what runs is what Inductor made of this graph: a hit is Inductor's own
compile of the same key, not a conveyor artifact.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from conveyor_inductor.specs import TensorSpec, describe_inputs

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class FxCacheApi:
    """What :func:`scope` takes from torch (Note [Inductor's FX graph cache])."""

    tracing_context: Any  # torch._guards.TracingContext
    tracing: Any  # torch._guards.tracing
    shape_env: Any  # torch.fx.experimental.symbolic_shapes.ShapeEnv
    fake_mode: Any  # torch._subclasses.fake_tensor.FakeTensorMode
    free_symbols: Any  # torch.fx.experimental.symbolic_shapes.free_symbols
    free_unbacked_symbols: Any
    lazy_graph_modules: Any  # torch.fx._lazy_graph_module._use_lazy_graph_module, or None


@functools.cache
def api() -> FxCacheApi | None:
    """The internals :func:`scope` uses, or ``None`` when this torch lacks one
    (then no graph is served by the cache)."""
    try:
        from torch._guards import TracingContext, tracing
        from torch._subclasses.fake_tensor import FakeTensorMode
        from torch.fx.experimental.symbolic_shapes import ShapeEnv, free_symbols, free_unbacked_symbols
    except ImportError as exc:
        log.debug("Inductor's FX graph cache is not used: %s", exc)
        return None
    if not callable(getattr(TracingContext, "try_get", None)):
        log.debug("Inductor's FX graph cache is not used: TracingContext has no try_get")
        return None
    lazy: Any = None  # a torch without lazy graph modules makes plain ones
    try:
        from torch.fx._lazy_graph_module import _use_lazy_graph_module as lazy
    except ImportError:
        pass
    return FxCacheApi(TracingContext, tracing, ShapeEnv, FakeTensorMode, free_symbols, free_unbacked_symbols, lazy)


def plain_graph_modules() -> contextlib.AbstractContextManager[Any]:
    """Where graph modules are made plain, not lazy (Note [Inductor's FX graph
    cache]: the key of a lazy one differs)."""
    found = api()
    if found is None or not callable(found.lazy_graph_modules):
        return contextlib.nullcontext()
    return found.lazy_graph_modules(False)  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Scope:
    """Where one graph is retraced and compiled.

    :ivar fake_mode: the fake mode of the retrace and of ``inputs``.
    :ivar inputs: the fake inputs handed to the retrace and to Inductor.
    :ivar cached: whether Inductor's FX graph cache may serve and store it.
    :ivar why: why it may not (for the debug log), or ``""``.
    """

    fake_mode: Any
    inputs: tuple[Any, ...]
    cached: bool
    why: str = ""
    _context: Any = None  # a TracingContext to enter, or None to keep the active one

    @contextlib.contextmanager
    def entered(self) -> Iterator[None]:
        """The compile's surroundings: the tracing context, if one is needed."""
        found = api()
        if self._context is None or found is None:
            yield
            return
        with found.tracing(self._context):
            yield

    @property
    def config(self) -> dict[str, Any]:
        """Inductor configuration this scope needs on top of the stage's."""
        return {} if self.cached else {"fx_graph_cache": False}


def scope(inputs: Sequence[Any], fake_mode: Any) -> Scope:
    """Where a graph with fake ``inputs`` of ``fake_mode`` is compiled
    (Note [Inductor's FX graph cache])."""
    found = api()
    inputs = tuple(inputs)
    if found is None:
        return Scope(fake_mode, inputs, False, "this torch lacks what the cache needs")
    symbols = found.free_symbols(inputs)
    shape_env = getattr(fake_mode, "shape_env", None)
    if not symbols and shape_env is None:
        described = describe_inputs(inputs)
        if described is None:
            return Scope(fake_mode, inputs, False, "an input that cannot be described")
        return described_scope(described)
    if shape_env is None:
        return Scope(fake_mode, inputs, False, "symbolic inputs without a ShapeEnv")
    if found.free_unbacked_symbols(inputs):
        return Scope(fake_mode, inputs, False, "an unbacked symbol")
    lifted = {x.node.expr for x in inputs if isinstance(x, torch.SymInt) and x.node.expr in symbols}
    if lifted != symbols:
        missing = ", ".join(sorted(str(s) for s in symbols - lifted))
        return Scope(fake_mode, inputs, False, f"symbols that are not inputs ({missing})")
    return Scope(fake_mode, inputs, True, "", _context_for(found, fake_mode))


def described_scope(described: Sequence[TensorSpec | int | float | bool]) -> Scope:
    """Where a graph whose static inputs are ``described`` is compiled: a fresh
    fake mode with an empty ``ShapeEnv``, fake inputs made in it, and a
    ``TracingContext`` of it (Note [Inductor's FX graph cache]), or the cache
    off when this torch lacks what it needs."""
    found = api()
    mode = FakeTensorMode() if found is None else found.fake_mode(shape_env=found.shape_env())
    with mode:
        fakes = tuple(d.fake() if isinstance(d, TensorSpec) else d for d in described)
    if found is None:
        return Scope(mode, fakes, False, "this torch lacks what the cache needs")
    return Scope(mode, fakes, True, "", found.tracing_context(mode))


def _context_for(found: FxCacheApi, fake_mode: Any) -> Any:
    """``None`` when the active tracing context is ``fake_mode``'s (dynamo's),
    else a new one of ``fake_mode``."""
    active = found.tracing_context.try_get()
    if active is not None and active.fake_mode is fake_mode:
        return None
    return found.tracing_context(fake_mode)
